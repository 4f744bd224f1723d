"""sgpu devices: the real discovery path on this machine, and the SGPU_FAKE_GPUS hook."""
import ctypes
import json
import os
import pathlib
import shutil
import subprocess

import pytest


def driver_present():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(driver_present(), reason="this machine has an NVIDIA driver")
def test_without_a_driver_one_line_and_an_empty_list(sgpu):
    res = sgpu.run("devices")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("no GPUs: no NVIDIA driver found (libnvidia-ml.so.1: ")
    assert res.stdout.count("\n") == 1
    res = sgpu.run("devices", "-o", "json")
    assert res.returncode == 0 and json.loads(res.stdout) == []


@pytest.mark.skipif(not driver_present() or not shutil.which("nvidia-smi"), reason="needs an NVIDIA driver")
def test_with_a_driver_nvml_agrees_with_nvidia_smi(sgpu):
    # Runs on GPU machines only: the real NVML path against the driver's own tool.
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid,pci.bus_id,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    expected = sorted((row.split(", ")[2].upper(), row.split(", ")[0], row.split(", ")[1]) for row in smi)
    res = sgpu.run("devices", "-o", "json")
    assert res.returncode == 0, res.stderr
    gpus = json.loads(res.stdout)
    assert [(g["pci_bus_id"], g["name"], g["uuid"]) for g in gpus] == expected
    assert [g["index"] for g in gpus] == list(range(len(gpus)))
    assert all(g["memory_bytes"] > 0 and g["type"] != "UNKNOWN" for g in gpus)
    assert all(g["visible"] for g in gpus)
    hidden = sgpu.run("devices", "-o", "json", env=dict(sgpu.env, CUDA_VISIBLE_DEVICES=""))
    assert not any(g["visible"] for g in json.loads(hidden.stdout))


CUDA_STUB = pathlib.Path("/usr/local/cuda/lib64/stubs/libcuda.so")


@pytest.mark.skipif(driver_present() or not CUDA_STUB.exists(), reason="needs the CUDA toolkit's stub and no driver")
def test_the_cuda_driver_fallback_loads_libcuda_and_reports_its_error(sgpu, tmp_path):
    # The toolkit's stub libcuda answers cuInit with CUDA_ERROR_STUB_LIBRARY:
    # the fallback really loads the library and calls it.
    (tmp_path / "libcuda.so.1").symlink_to(CUDA_STUB)
    env = dict(sgpu.env, LD_LIBRARY_PATH=str(tmp_path))
    res = sgpu.run("devices", env=env)
    assert res.returncode == 0, res.stderr
    assert "libcuda.so.1: cuInit failed: CUDA_ERROR_STUB_LIBRARY" in res.stdout
    assert json.loads(sgpu.run("devices", "--output", "json", env=env).stdout) == []


def test_fake_inventory_listing_and_visibility(sgpu, tmp_path):
    env = dict(sgpu.env, SGPU_FAKE_GPUS="2xA100,2xH100", CUDA_VISIBLE_DEVICES="3,1")
    res = sgpu.run("devices", "-o", "json", env=env)
    assert res.returncode == 0, res.stderr
    assert "SGPU_FAKE_GPUS is set" in res.stderr
    gpus = json.loads(res.stdout)
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert [g["type"] for g in gpus] == ["A100", "A100", "H100", "H100"]
    assert [g["visible"] for g in gpus] == [False, True, False, True]
    assert [g["cuda_index"] for g in gpus] == [None, 1, None, 0]
    text = sgpu.run("devices", env=env).stdout.splitlines()
    assert text[0].startswith("4 GPUs (SGPU_FAKE_GPUS") and "CUDA_VISIBLE_DEVICES leaves 2 visible" in text[0]
    assert text[1].split() == ["index", "type", "name", "memory", "uuid", "pci", "bus", "id", "visible"]
    assert text[5].split()[0] == "3" and text[5].endswith("yes, as cuda:0")
    # What -o json prints is an inventory the hook reads back.
    saved = tmp_path / "node.json"
    saved.write_text(res.stdout)
    again = sgpu.run("devices", "-o", "json", env=dict(env, SGPU_FAKE_GPUS=str(saved), CUDA_VISIBLE_DEVICES="0"))
    assert [g["uuid"] for g in json.loads(again.stdout)] == [g["uuid"] for g in gpus]


def test_bad_fake_inventory_is_a_clear_error(sgpu, tmp_path):
    res = sgpu.run("devices", env=dict(sgpu.env, SGPU_FAKE_GPUS=str(tmp_path / "none.json")))
    assert res.returncode == 2 and "cannot read the inventory file" in res.stderr
    res = sgpu.run("devices", env=dict(sgpu.env, SGPU_FAKE_GPUS="eightxH100"))
    assert res.returncode == 2 and "SGPU_FAKE_GPUS: invalid entry 'eightxH100'" in res.stderr
    res = sgpu.run("devices", "-o", "yaml")
    assert res.returncode == 2


def test_cpu_ranks_never_ask_the_driver(sgpu):
    # --nproc N needs no GPU: the launch does not load NVML or libcuda (on a
    # GPU node their start costs tens of milliseconds). The broken inventory
    # is read only by what asks for GPUs.
    env = dict(sgpu.env, SGPU_FAKE_GPUS="eightxH100")
    cpu = sgpu.run("launch", "--nproc", 2, "--no-python", "true", env=env)
    assert cpu.returncode == 0, cpu.stderr
    for args in (["--gpus", 1], ["--nproc", "auto"]):
        gpu = sgpu.run("launch", *args, "--no-python", "true", env=env)
        assert gpu.returncode == 2 and "SGPU_FAKE_GPUS: invalid entry 'eightxH100'" in gpu.stderr, gpu.stderr
    dry = sgpu.run("launch", "--nproc", 2, "--dry-run", "--no-python", "true", env=env)
    assert dry.returncode == 2 and "SGPU_FAKE_GPUS" in dry.stderr  # a dry run shows the node's GPUs
