"""sgpu completion bash|zsh|fish, driven in the real shells: what a user's
<TAB> would offer, and that every option of the CLI is in each script."""
import os
import re
import shutil
import subprocess

import pytest

BASH_HARNESS = r'''
source <(sgpu completion bash)
comp() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _sgpu; printf '%s\n' "${COMPREPLY[@]}"; }
'''
# zsh runs the bash function through bashcompinit, whose compgen calls it in sh
# emulation; zsh's own compadd then filters by the word typed.
ZSH_HARNESS = r'''
source <(sgpu completion zsh)
comp() { emulate -L sh; setopt kshglob noshglob braceexpand; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _sgpu; printf '%s\n' "${COMPREPLY[@]}"; }
'''


@pytest.fixture
def shell_env(sgpu, tmp_path):
    """sgpu on PATH (the completion calls it for run ids), one finished run."""
    env = dict(sgpu.env, PATH=f"{os.path.dirname(sgpu.bin)}:{os.environ['PATH']}", HOME=str(tmp_path))
    assert os.path.basename(sgpu.bin) == "sgpu"
    res = sgpu.run("launch", "--name", "warmup", "--nproc", 1, "--no-python", "true")
    assert res.returncode == 0, res.stderr
    run_id = sgpu.run("runs", "--ids").stdout.split()[0]
    return env, run_id


def complete(shell, harness, env, *words):
    script = harness + "comp " + " ".join("'" + w + "'" for w in words) + "\n"
    res = subprocess.run([shell, "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    return res.stdout.split()


def test_bash_completes_subcommands_flags_choices_and_run_ids(shell_env, tmp_path):
    env, run_id = shell_env
    assert complete("bash", BASH_HARNESS, env, "sgpu", "sta") == ["status", "stacks"]
    assert complete("bash", BASH_HARNESS, env, "sgpu", "launch", "--back") == ["--backend"]
    assert complete("bash", BASH_HARNESS, env, "sgpu", "launch", "--backend", "s") == ["ssh", "slurm"]
    assert complete("bash", BASH_HARNESS, env, "sgpu", "launch", "--cpu-bind", "") == [
        "none", "numa", "socket", "core", "exclusive", "node"]
    assert complete("bash", BASH_HARNESS, env, "sgpu", "runs", "-o", "") == ["text", "json"]
    assert complete("bash", BASH_HARNESS, env, "sgpu", "status", "") == ["last", run_id]
    assert complete("bash", BASH_HARNESS, env, "sgpu", "logs", "-f", run_id[:8]) == [run_id]
    # The entrypoint is a file; after it, the words are the job's: files, no sgpu flag.
    (tmp_path / "train.py").write_text("")
    env_here = dict(env)
    script = BASH_HARNESS + f"cd {tmp_path}; comp sgpu launch --nproc 2 tr; echo ==; comp sgpu launch train.py --ep\n"
    out = subprocess.run(["bash", "-c", script], env=env_here, capture_output=True, text=True, timeout=30).stdout
    assert out.split("==")[0].split() == ["train.py"]
    assert out.split("==")[1].split() == []


def test_bash_completion_through_bash_completion_in_an_interactive_shell(shell_env, tmp_path):
    # The way a user loads it: an interactive bash, `source <(sgpu completion bash)`, then `complete -p sgpu`.
    env, _ = shell_env
    res = subprocess.run(["bash", "-i", "-c", "source <(sgpu completion bash) && complete -p sgpu"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.stdout.strip() == "complete -F _sgpu sgpu", res.stdout + res.stderr


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh missing: run scripts/install-deps")
def test_zsh_completes_through_bashcompinit(shell_env):
    env, run_id = shell_env
    registered = subprocess.run(["zsh", "-c", "source <(sgpu completion zsh); print ${_comps[sgpu]}"], env=env,
                                capture_output=True, text=True, timeout=30)
    assert registered.stdout.strip() == "_bash_complete -F _sgpu", registered.stdout + registered.stderr
    assert complete("zsh", ZSH_HARNESS, env, "sgpu", "launch", "--backend", "s") == ["local", "ssh", "slurm"]
    assert complete("zsh", ZSH_HARNESS, env, "sgpu", "status", "") == ["last", run_id]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish missing: run scripts/install-deps")
def test_fish_completes_flags_choices_and_run_ids(shell_env):
    env, run_id = shell_env

    def fish(line):
        res = subprocess.run(["fish", "-c", f"sgpu completion fish | source; complete -C '{line}'"], env=env,
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0 and res.stderr == "", res.stderr
        return [ln.split("\t")[0] for ln in res.stdout.splitlines()]

    assert fish("sgpu launch --back") == ["--backend"]
    assert sorted(fish("sgpu launch --backend ")) == ["local", "slurm", "ssh"]
    assert sorted(fish("sgpu status ")) == sorted(["last", run_id])
    assert "status" in fish("sgpu sta")


def help_flags(sgpu, *command):
    """Every --flag and -x that --help lists for the command."""
    text = sgpu.run(*command, "--help").stdout
    options = text.split("Options:", 1)[1]
    flags = set()
    for names in re.findall(r"^  (-\S+)", options, re.M):  # "-o,--output" or "--gpus"
        flags.update(n for n in names.split(",") if n.startswith("-"))
    return flags


def test_every_flag_and_subcommand_is_in_every_shells_completion(sgpu):
    scripts = {shell: sgpu.run("completion", shell).stdout for shell in ("bash", "zsh", "fish")}
    top = sgpu.run("--help").stdout.split("Subcommands:", 1)[1]
    subcommands = re.findall(r"^  ([a-z]+)\s", top, re.M)
    assert {"launch", "status", "completion"} <= set(subcommands)
    for sub in subcommands:
        flags = help_flags(sgpu, sub)
        assert flags, sub
        for shell, script in scripts.items():
            assert re.search(rf"\b{sub}\b", script), (shell, sub)
            for flag in flags:
                if shell == "fish":
                    form = f" -l {flag[2:]}" if flag.startswith("--") else f" -s {flag[1:]}"
                    assert re.search(rf"__fish_seen_subcommand_from {sub}'.*{re.escape(form)}[ \n]", script), \
                        (shell, sub, flag)
                else:
                    assert flag in script, (shell, sub, flag)
