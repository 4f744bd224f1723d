"""Job specs: --config, --set, SGPU_* variables, --dry-run, validation, against the real binary."""
import json
import re
import os

import pytest

from conftest import ROOT, TORCH_PYTHON, python_program

CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
# What each example in configs/ asks for: ranks in all, nodes, backend.
EXPECTED = {
    "h100-node.toml": (8, 1, "local"),
    "ci-cpu.toml": (2, 1, "local"),
    "ssh-two-nodes.toml": (16, 2, "ssh"),
    "slurm.toml": (16, 2, "slurm"),
}


@pytest.fixture
def project(sgpu, tmp_path):
    """A checkout-like cwd: train.py next to the repository's examples/."""
    (tmp_path / "train.py").write_text("print('train')\n")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    sgpu.env["SGPU_FAKE_GPUS"] = "8xH100"
    return tmp_path


def dry_json(sgpu, *args, env=None):
    res = sgpu.run("launch", "--dry-run", "-o", "json", *args, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_configs_cover_every_example():
    assert sorted(p.name for p in CONFIGS) == sorted(EXPECTED)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_each_example_config_dry_runs(sgpu, project, config):
    ranks, nodes, backend = EXPECTED[config.name]
    text = sgpu.run("launch", "--config", config, "--dry-run")
    assert text.returncode == 0, text.stderr
    assert "nothing was started" in text.stdout
    doc = dry_json(sgpu, "--config", config)
    assert doc["dry_run"] is True and doc["config"] == str(config)
    assert doc["world_size"] == ranks == len(doc["ranks"])
    assert len(doc["nodes"]) == nodes and doc["backend"] == backend
    assert [r["rank"] for r in doc["ranks"]] == list(range(ranks))
    for r in doc["ranks"]:
        assert r["env"]["RANK"] == str(r["rank"]) and r["env"]["WORLD_SIZE"] == str(ranks)
        assert r["env"]["NNODES"] == str(nodes)
    # Every setting says where it came from: this file, $SGPU_PYTHON, or -o json.
    assert all(s["from"].startswith(f"{config}:") or s["from"] in ("$SGPU_PYTHON", "--output")
               for s in doc["settings"])
    assert any(s["from"].startswith(f"{config}:") for s in doc["settings"])
    # Nothing started, nothing created.
    assert not os.path.exists(sgpu.env["SGPU_HOME"])


def test_the_cpu_ci_config_trains_for_real(sgpu, project):
    res = sgpu.run("launch", "--config", ROOT / "configs" / "ci-cpu.toml", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "[0] final loss " in res.stdout  # the example prints on rank 0


def test_a_config_drives_a_real_launch(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "job.toml").write_text(f"""
[job]
entrypoint = "{python_program('dump_env.py')}"
[resources]
nproc = 3
[env]
FROM_SPEC = "yes"
OMP_NUM_THREADS = 2
OUT_DIR = "{out}"
[timeouts]
timeout = "2m"
""")
    res = sgpu.run("launch", "--config", "job.toml", "--set", "resources.nproc=2")
    assert res.returncode == 0, res.stderr
    envs = [json.loads((out / f"env-{r}.json").read_text()) for r in range(2)]
    assert not (out / "env-2.json").exists()  # --set won over the file
    for e in envs:
        assert e["FROM_SPEC"] == "yes" and e["OMP_NUM_THREADS"] == "2" and e["WORLD_SIZE"] == "2"


def test_dry_run_json_shows_every_rank_with_secrets_masked(sgpu, project):
    env = dict(sgpu.env, HF_TOKEN="hf_very_secret", MLFLOW_TRACKING_URI="https://bob:hunter2@mlflow.example/")
    env["CUDA_VISIBLE_DEVICES"] = "7,5,3,1"
    doc = dry_json(sgpu, "--gpus", 3, "--gpu-bind", "per-rank", "--set", "env.WANDB_API_KEY=k123", "train.py",
                   "--lr", "0.1", env=env)
    assert doc["command"] == [TORCH_PYTHON, "-u", "train.py", "--lr", "0.1"]
    assert doc["executable"] == TORCH_PYTHON and doc["cwd"] == str(project)
    assert doc["gpu_type"] == "H100" and doc["timeout_s"] == 3 * 3600 and doc["grace_s"] == 30
    assert doc["master_port"] is None
    assert [r["devices"][0]["index"] for r in doc["ranks"]] == [7, 5, 3]
    for r in doc["ranks"]:
        e = r["env"]
        assert e["CUDA_VISIBLE_DEVICES"] == str(r["devices"][0]["index"])
        assert e["LOCAL_RANK"] == str(r["rank"]) and e["SGPU_GPU_TYPE"] == "H100"
        assert e["HF_TOKEN"] == "****" and e["WANDB_API_KEY"] == "****"
        assert e["MLFLOW_TRACKING_URI"] == "https://bob:****@mlflow.example/"
    text = sgpu.run("launch", "--dry-run", "--gpus", 1, "--set", "env.WANDB_API_KEY=k123", "train.py", env=env)
    assert text.returncode == 0, text.stderr
    assert "hf_very_secret" not in text.stdout and "k123" not in text.stdout and "hunter2" not in text.stdout


def test_precedence_file_env_flags_set(sgpu, project):
    (project / "job.toml").write_text('[job]\nentrypoint = "train.py"\npython = "/from/file"\n'
                                      '[timeouts]\ntimeout = "1h"\n[resources]\ngpus = 8\n')

    def resolved(*args, **extra_env):
        doc = dry_json(sgpu, "--config", "job.toml", *args, env=dict(sgpu.env, **extra_env))
        return {s["key"]: (s["value"], s["from"]) for s in doc["settings"]}, doc

    env_only = dict(SGPU_PYTHON="/usr/bin/python3")
    settings, doc = resolved(**env_only)
    assert settings["job.python"] == ("/usr/bin/python3", "$SGPU_PYTHON")
    assert settings["timeouts.timeout"] == ("1h", "job.toml:5:11")
    settings, doc = resolved("--python", TORCH_PYTHON, "--timeout", "30m", **env_only)
    assert settings["job.python"] == (TORCH_PYTHON, "--python") and doc["timeout_s"] == 1800
    settings, doc = resolved("--timeout", "30m", "--set", "timeouts.timeout=10m", "--nproc", 2, **env_only)
    assert settings["timeouts.timeout"] == ("10m", "--set") and doc["timeout_s"] == 600
    # --nproc replaced the file's gpus = 8: CPU ranks, no GPUs.
    assert "resources.gpus" not in settings and doc["world_size"] == 2 and doc["ranks"][0]["devices"] == []


def test_slurm_arg_repeats_one_salloc_argument_per_use(sgpu, project):
    doc = dry_json(sgpu, "--backend", "slurm", "--nodes", 2, "--nproc", 1, "--slurm-arg=--comment=x",
                   "--slurm-arg=--exclusive", "--slurm-arg=--comment=two words", "train.py")
    settings = {s["key"]: (s["value"], s["from"]) for s in doc["settings"]}
    assert settings["slurm.extra_args"] == (["--comment=x", "--exclusive", "--comment=two words"], "--slurm-arg")

def test_errors_exit_2_naming_where_and_what_is_valid(sgpu, project):
    (project / "bad.toml").write_text('[job]\nentrypoint = "train.py"\n\n[resources]\ngpus = 8\nnproc = 2\n'
                                      'gpu-type = "H100"\n[timeouts]\ntimeout = -1\n')
    for extra in ([], ["--dry-run"]):
        res = sgpu.run("launch", "--config", "bad.toml", *extra)
        assert res.returncode == 2
        assert res.stdout == ""
        # Each value's problems in file order, then what the values say together.
        lines = res.stderr.splitlines()
        assert lines[0] == "sgpu: error: 3 problems in the job spec:"
        assert lines[1].startswith("  bad.toml:7:1: unknown key 'resources.gpu-type'; did you mean "
                                   "'resources.gpu_type'? Valid keys in [resources]: backend, nodes, gpus")
        assert lines[2].startswith("  bad.toml:9:11: timeouts.timeout = -1: must be a positive number of seconds")
        assert lines[3].startswith("  bad.toml:5:8: resources.gpus and resources.nproc (bad.toml:6:9) exclude")
    res = sgpu.run("launch", "--dry-run", "--set", "resources.gpu=2", "train.py")
    assert res.returncode == 2 and "did you mean 'resources.gpus'?" in res.stderr
    res = sgpu.run("launch", "--config", "missing.toml", "--dry-run")
    assert res.returncode == 2 and "--config missing.toml: cannot read it" in res.stderr
    res = sgpu.run("launch", "--dry-run", "--gpus", 1, "nothere.py")
    assert res.returncode == 2 and "script 'nothere.py': no such file" in res.stderr


def test_the_ssh_example_config_launches_and_names_the_unreachable_host(sgpu, project):
    # configs/ssh-two-nodes.toml's hosts do not exist here: the launch gets as
    # far as ssh and reports which host it could not reach, with ssh's 255.
    env = dict(sgpu.env, WANDB_PROJECT="demo")
    res = sgpu.run("launch", "--config", ROOT / "configs" / "ssh-two-nodes.toml", "--set", "ssh.connect_timeout=2s",
                   env=env)
    assert res.returncode == 255, res.stderr
    # Both hosts fail at once; whichever ssh ends first is the root cause.
    # ... and names where the host was listed: the file, line and key.
    assert re.search(r"cannot reach gpu-[ab] \(\S*ssh-two-nodes.toml:\d+:\d+: ssh.hosts entry [12]\) over ssh",
                     res.stderr), res.stderr


def test_fake_json_inventory_drives_selection(sgpu, project):
    inventory = project / "node.json"
    inventory.write_text(json.dumps(
        [{"name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": f"00000000:{0x10 + i:02X}:00.0"} for i in range(2)]
        + [{"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-h100-{i}"} for i in range(2, 6)]))
    env = dict(sgpu.env, SGPU_FAKE_GPUS=str(inventory))
    doc = dry_json(sgpu, "--gpus", 3, "--gpu-type", "nvidia-h100-80gb", "train.py", env=env)
    assert [r["devices"][0]["uuid"] for r in doc["ranks"]] == ["GPU-h100-2", "GPU-h100-3", "GPU-h100-4"]
    assert doc["ranks"][0]["env"]["CUDA_VISIBLE_DEVICES"] == "2,3,4"
    # With neither --gpus nor --nproc: one rank per visible GPU of one type.
    doc = dry_json(sgpu, "train.py", env=dict(env, CUDA_VISIBLE_DEVICES="5,4"))
    assert doc["world_size"] == 2 and doc["ranks"][0]["env"]["CUDA_VISIBLE_DEVICES"] == "5,4"
    cases = [
        (["--gpus", 5, "--gpu-type", "H100"], "--gpus 5: this node has only 4 visible H100 GPUs (2x A100, 4x H100)"),
        (["--gpus", 1, "--gpu-type", "B200"], "--gpu-type B200: this node has 2x A100, 4x H100"),
        (["--set", "resources.gpus=3"], "--set resources.gpus=3: this node has only 2 visible A100 GPUs"),
    ]
    for args, message in cases:
        for mode in (["--dry-run"], []):
            res = sgpu.run("launch", *mode, *args, "train.py", env=env)
            assert res.returncode == 2, (args, res.stderr)
            assert message in res.stderr, (args, res.stderr)
    inventory.write_text('[{"name": "NVIDIA L4", "colour": "green"}]')
    res = sgpu.run("launch", "--dry-run", "--gpus", 1, "train.py", env=env)
    assert res.returncode == 2 and 'GPU 0 (item 1): unknown field "colour"' in res.stderr
