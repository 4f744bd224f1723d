"""What a user gets besides running jobs: shell completion (sgpu completion
bash|zsh|fish) driven in the real shells, the man page (sgpu manual)
rendered by man, and sgpu --version. Each is generated from the CLI itself;
the tests fail when a flag --help lists is missing from any of them."""
import os
import pathlib
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


def test_no_flag_name_is_taken_twice(sgpu):
    # launch's options are added in small groups, which CLI11 checks for a
    # name taken twice only within each group; a second --nproc would be
    # listed and never parsed.
    top = sgpu.run("--help").stdout.split("Subcommands:", 1)[1]
    for sub in re.findall(r"^  ([a-z]+)\s", top, re.M):
        options = sgpu.run(sub, "--help").stdout.split("Options:", 1)[1]
        names = [n for line in re.findall(r"^  (-\S+)", options, re.M) for n in line.split(",") if n.startswith("-")]
        assert len(names) > 1 and len(names) == len(set(names)), (sub, sorted(n for n in names if names.count(n) > 1))


# --- the man page -----------------------------------------------------------

def rendered_manual(sgpu):
    page = sgpu.run("manual").stdout
    assert page.startswith(".TH SGPU 1"), page[:200]
    res = subprocess.run(["man", "--warnings", "-l", "-"], input=page, capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, MANWIDTH="200"))
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr  # groff's warnings: a page that renders cleanly
    return res.stdout


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db missing: run scripts/install-deps")
def test_the_man_page_renders_and_has_every_subcommand_flag_and_exit_code(sgpu):
    text = rendered_manual(sgpu)
    top = sgpu.run("--help").stdout.split("Subcommands:", 1)[1]
    for sub in re.findall(r"^  ([a-z]+)\s", top, re.M):
        section = text.split(f"\nSGPU {sub}\n", 1)
        assert len(section) == 2, sub
        body = section[1].split("\nSGPU ", 1)[0].split("\nEXIT STATUS", 1)[0]
        for flag in help_flags(sgpu, sub):
            assert re.search(rf"(^|[\s,]){re.escape(flag)}([\s,]|$)", body, re.M), (sub, flag)
    # The exit codes are the README's table, row by row.
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    codes = re.findall(r"^\| ([^|]+?) \| ", table, re.M)
    assert len(codes) >= 10, table
    exit_status = text.split("EXIT STATUS", 1)[1].split("FILES", 1)[0]
    assert [c for c in codes if c not in ("code", "---")] == re.findall(r"^ {7}(\S[^\n]*?)(?: {2,}|\n)", exit_status,
                                                                       re.M), exit_status


def test_version_says_the_version_commit_build_and_optional_parts(sgpu):
    res = sgpu.run("--version")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 4, lines
    assert re.fullmatch(r"sgpu \d+\.\d+\.\d+", lines[0]), lines
    m = re.fullmatch(r"commit ([0-9a-f]{12})(-dirty)?", lines[1])
    assert m, lines
    root = pathlib.Path(__file__).resolve().parents[2]
    if (root / ".git").exists():  # a commit of this repository
        assert subprocess.run(["git", "-C", str(root), "cat-file", "-e", m.group(1) + "^{commit}"]).returncode == 0
    assert re.fullmatch(r"build (Debug|Release|RelWithDebInfo|MinSizeRel)(, ASan\+UBSan)?", lines[2]), lines
    assert re.fullmatch(r"CUDA and NCCL headers: (yes|no) \(.*\)", lines[3]), lines
