"""A real MLflow tracking server on loopback for the tests and the benchmark
(stdlib only): `mlflow server` from the project's virtual environment
(scripts/venv), a sqlite store and the artifact proxy (--serve-artifacts), in
its own process group, stopped with everything it started."""
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ports import free_port_block  # noqa: E402

# The basic-auth app's first administrator: a fresh password per process (MLflow refuses its old default).
ADMIN_USER = "admin"
ADMIN_PASSWORD = "sgpu-" + os.urandom(12).hex()


def venv_python():
    """The virtual environment's interpreter: $SGPU_VENV, else what scripts/venv makes (and prints)."""
    venv = os.environ.get("SGPU_VENV")
    if not venv:
        venv = subprocess.run([str(ROOT / "scripts" / "venv")], capture_output=True, text=True,
                              check=True).stdout.strip()
    return os.path.join(venv, "bin", "python")


class MlflowServer:
    """`with MlflowServer(dir) as server:` server.url, server.startup_s."""

    READY = "Application startup complete"

    def __init__(self, workdir, auth=False, start_timeout=180):
        self.workdir = pathlib.Path(workdir)
        self.auth = auth
        self.start_timeout = start_timeout
        self.port = free_port_block(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.python = venv_python()
        self.log_path = self.workdir / "mlflow-server.log"
        self.proc = None
        self.startup_s = None
        self._ready = threading.Event()  # the ready line came, or the server exited
        self._up = False  # the ready line came

    def client_env(self):
        """What MLflow's Python client needs to talk to this server."""
        env = {"MLFLOW_TRACKING_URI": self.url}
        if self.auth:
            env.update(MLFLOW_TRACKING_USERNAME=ADMIN_USER, MLFLOW_TRACKING_PASSWORD=ADMIN_PASSWORD)
        return env

    def __enter__(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # no background job workers
        cmd = [self.python, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
               "--serve-artifacts", "--artifacts-destination", str(self.workdir / "artifacts")]
        if self.auth:
            ini = self.workdir / "basic_auth.ini"
            ini.write_text("[mlflow]\ndefault_permission = READ\n"
                           f"database_uri = sqlite:///{self.workdir / 'auth.db'}\n"
                           f"admin_username = {ADMIN_USER}\nadmin_password = {ADMIN_PASSWORD}\n"
                           "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
            env["MLFLOW_AUTH_CONFIG_PATH"] = str(ini)
            env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = os.urandom(16).hex()  # CSRF protection of the auth app
            cmd += ["--app-name", "basic-auth"]
        started = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        threading.Thread(target=self._copy_log, daemon=True).start()
        # The server says when it is ready; the wait ends then, or when it exits.
        if not self._ready.wait(self.start_timeout) or not self._up:
            self.stop()
            raise RuntimeError(f"mlflow server did not start in {self.start_timeout}s:\n{self.log_tail()}")
        self.startup_s = time.monotonic() - started
        return self

    def _copy_log(self):
        with open(self.log_path, "wb") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                if self.READY.encode() in line:
                    self._up = True
                    self._ready.set()
        self._ready.set()  # exited: __enter__ stops waiting and reports it

    def log_tail(self, lines=30):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        try:  # workers it started in its group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None

    def __exit__(self, *exc):
        self.stop()
