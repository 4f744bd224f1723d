// --sync-env on the launcher node: the job's interpreter describes its
// environment and makes the wheels its nodes will need (env_sync.hpp).
#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "backends/ssh/env_sync.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/process/command.hpp"

namespace sgpu::launcher::ssh {
namespace fs = std::filesystem;

namespace {

// Runs in the job's interpreter. A distribution inside the virtual
// environment is replicated: from its installed files and RECORD (the
// bytes this node runs, no index needed; byte-identical each time, so its
// key, the RECORD's hash, names the wheel for good), or, when it is an
// editable install, as a wheel pip builds from its source tree (keyed by the
// tree's contents). What it sees outside the environment is the system's.
constexpr const char* kInspect = R"PY(
import json, os, re, sys

cache, build = sys.argv[1], sys.argv[2] == "1"
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()


def fail(message):
    print(json.dumps({"error": message}))
    sys.exit(0)


class Dist:
    """An installed distribution, named by its metadata directory (as
    installers name it: no METADATA parse, which is most of what
    importlib.metadata costs at start)."""

    def __init__(self, base, info):
        self.base, self.info = base, info
        stem = info.rsplit(".", 1)[0]
        self.name, _, version = stem.partition("-")
        self.version = version.split("-py")[0] if info.endswith(".egg-info") else version

    def read(self, name):
        try:
            with open(os.path.join(self.base, self.info, name), encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None


def distributions():
    seen = set()
    for base in sys.path:
        try:
            names = sorted(os.listdir(base or "."))
        except OSError:
            continue
        for info in names:
            if info.endswith((".dist-info", ".egg-info")):
                d = Dist(base or ".", info)
                if d.name and d.version and norm(d.name) not in seen:  # the first on sys.path is imported
                    seen.add(norm(d.name))
                    yield d


prefix = os.path.realpath(sys.prefix)
venv = sys.prefix != sys.base_prefix
system_site = not venv
cfg = os.path.join(sys.prefix, "pyvenv.cfg")
if venv and os.path.isfile(cfg):
    with open(cfg) as f:
        for line in f:
            k, _, v = line.partition("=")
            if k.strip() == "include-system-site-packages":
                system_site = v.strip().lower() == "true"
import platform, sysconfig  # noqa: E402
out = {"version": platform.python_version(), "minor": "%d.%d" % sys.version_info[:2],
       "implementation": sys.implementation.name, "platform": sysconfig.get_platform(),
       "venv": venv, "system_site": system_site, "packages": [], "system": {}, "skipped": []}
FIXED = (1980, 1, 1, 0, 0, 0)


def tree_key(root):
    import hashlib
    h = hashlib.sha256()
    skip = {".git", "__pycache__", "build", "dist", ".venv", ".tox", ".eggs", ".mypy_cache", ".pytest_cache"}
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in skip and not x.endswith(".egg-info"))
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            p = os.path.join(d, name)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            try:
                with open(p, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
            except OSError:
                pass
    return h.hexdigest()[:16]


def first_tag(d):
    for line in (d.read("WHEEL") or "").splitlines():
        k, _, v = line.partition(":")
        if k.strip() == "Tag":
            return v.strip()
    return "py3-none-any"


def repack(d, record, dest):
    import base64, configparser, csv, hashlib, io, zipfile
    digest = lambda data: "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = list(csv.reader(record.splitlines()))
    entry_points = configparser.ConfigParser(delimiters=("=",))
    entry_points.optionxform = str
    entry_points.read_string(d.read("entry_points.txt") or "")
    scripts = {k for g in ("console_scripts", "gui_scripts") if entry_points.has_section(g) for k in entry_points[g]}
    out_record = io.StringIO()
    writer = csv.writer(out_record, lineterminator="\n")
    tmp = "%s.part%d" % (dest, os.getpid())
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for row in rows:
            if not row:
                continue
            path = row[0]
            parts = path.split("/")
            if path.startswith("..") or os.path.isabs(path):
                if parts[-1] not in scripts:  # console scripts are written again from entry_points.txt
                    out["skipped"].append("%s %s: %s" % (d.name, d.version, path))
                continue
            if "__pycache__" in parts or path.endswith(".pyc"):
                continue
            if parts[0] == d.info and parts[-1] in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                continue
            full = os.path.join(d.base, path)
            with open(full, "rb") as f:
                data = f.read()
            zi = zipfile.ZipInfo(path, FIXED)
            zi.external_attr = (os.stat(full).st_mode & 0xFFFF) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
            writer.writerow([path, digest(data), len(data)])
        writer.writerow([d.info + "/RECORD", "", ""])
        zi = zipfile.ZipInfo(d.info + "/RECORD", FIXED)
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, out_record.getvalue())
    os.replace(tmp, dest)


def built(key):
    d = os.path.join(cache, key)
    found = sorted(f for f in os.listdir(d) if f.endswith(".whl")) if os.path.isdir(d) else []
    return found[0] if found else None


def build_editable(name, src, key):
    import fcntl, shutil, subprocess, tempfile
    os.makedirs(cache, exist_ok=True)
    # One build of a source tree at a time: setuptools builds in the tree.
    lock = open(os.path.join(cache, ".build-%s.lock" % key), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    whl = built(key)
    if whl:
        return whl
    tmpd = tempfile.mkdtemp(dir=cache, prefix=".build-")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "--disable-pip-version-check", "-w", tmpd, src], capture_output=True, text=True)
    made = [f for f in os.listdir(tmpd) if f.endswith(".whl")]
    if r.returncode != 0 or not made:
        shutil.rmtree(tmpd, ignore_errors=True)
        why = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
        fail("cannot build a wheel of the editable package %s from %s with %s -m pip wheel: %s"
             % (name, src, sys.executable, why))
    os.makedirs(os.path.join(cache, key), exist_ok=True)
    os.replace(os.path.join(tmpd, made[0]), os.path.join(cache, key, made[0]))
    shutil.rmtree(tmpd, ignore_errors=True)
    return made[0]


for d in distributions():
    name = d.name
    where = os.path.realpath(d.base)
    if not venv or not (where + os.sep).startswith(prefix + os.sep):
        out["system"][norm(name)] = d.version
        continue
    try:
        url = json.loads(d.read("direct_url.json") or "null")
    except ValueError:
        url = None
    editable = bool(url and url.get("dir_info", {}).get("editable"))
    entry = {"name": norm(name), "version": d.version, "editable": editable, "wheel": ""}
    if editable:
        from urllib.parse import unquote, urlparse
        src = unquote(urlparse(url.get("url", "")).path)
        entry["source"] = src
        entry["key"] = key = tree_key(src)
        whl = built(key)
        if whl is None and build:
            whl = build_editable(name, src, key)
    else:
        record = d.read("RECORD")
        if record is None:
            fail("cannot replicate %s %s from %s: it was installed without a RECORD (not by pip or uv); reinstall "
                 "it with pip or uv" % (name, d.version, sys.prefix))
        import hashlib
        entry["key"] = key = hashlib.sha256(record.encode()).hexdigest()[:16]
        whl = built(key)
        if whl is None and build:
            whl = "%s-%s-%s.whl" % (re.sub(r"[-_.]+", "_", name), d.version.replace("-", "_"), first_tag(d))
            os.makedirs(os.path.join(cache, key), exist_ok=True)
            try:
                repack(d, record, os.path.join(cache, key, whl))
            except (OSError, StopIteration, ValueError) as e:
                fail("cannot make a wheel of %s %s from its installed files: %s" % (name, d.version, e))
    if whl:
        entry["wheel"] = key + "/" + whl
        entry["bytes"] = os.path.getsize(os.path.join(cache, key, whl))
    out["packages"].append(entry)
print(json.dumps(out))
)PY";

// uv for the nodes: $SGPU_UV, else the one beside the job's interpreter (a
// virtual environment that has uv), else the PATH's.
std::string find_uv(const std::string& interpreter, const env::Environment& environment) {
  if (auto it = environment.find("SGPU_UV"); it != environment.end() && !it->second.empty()) {
    if (::access(it->second.c_str(), X_OK) != 0)
      throw Error(fmt::format("SGPU_UV={}: not an executable file", it->second), 2);
    return fs::absolute(it->second).string();
  }
  auto beside = fs::path(interpreter).parent_path() / "uv";
  std::error_code ec;
  if (interpreter.find('/') != std::string::npos && fs::is_regular_file(beside, ec) &&
      ::access(beside.c_str(), X_OK) == 0)
    return fs::absolute(beside).string();
  return find_on_path("uv", environment);
}

}  // namespace

const char* env_inspect_script() { return kInspect; }

std::vector<std::string> inspect_argv(const std::string& interpreter, const env::Environment& environment, bool build) {
  return {interpreter, "-c", kInspect, wheel_cache_dir(environment), build ? "1" : "0"};
}

EnvLock read_inspection(const CommandResult& result, const std::string& interpreter,
                        const env::Environment& environment) {
  if (!result.status)
    throw Error(fmt::format("--sync-env: cannot run the job's interpreter {}: {}", interpreter, result.start_error), 1);
  if (!result.ok())
    throw Error(fmt::format("--sync-env: {} could not describe its environment ({}): {}", interpreter,
                            result.timed_out ? "no answer in 10 minutes" : result.status->describe(),
                            result.err.substr(result.err.size() > 400 ? result.err.size() - 400 : 0)),
                1);
  auto lock = parse_env_lock(result.out, interpreter);
  lock.uv = find_uv(interpreter, environment);
  return lock;
}

std::string interpreter_minor(const std::string& interpreter) {
  static const std::regex cfg_version(R"(^\s*version(_info)?\s*=\s*(\d+\.\d+))");
  static const std::regex file_version(R"(^python(\d+\.\d+)$)");
  std::ifstream cfg(fs::path(interpreter).parent_path().parent_path() / "pyvenv.cfg");
  std::smatch m;
  for (std::string line; std::getline(cfg, line);)
    if (std::regex_search(line, m, cfg_version)) return m[2];
  std::error_code ec;
  auto name = fs::canonical(interpreter, ec).filename().string();
  return !ec && std::regex_match(name, m, file_version) ? std::string(m[1]) : std::string();
}

}  // namespace sgpu::launcher::ssh
