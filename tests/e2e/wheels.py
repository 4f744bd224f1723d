"""Wheels made by hand, as a package index would serve them: what
--sync-env's tests and benchmark install into a job's virtual environment
without reaching any index."""
import base64
import hashlib
import zipfile


def make_wheel(out_dir, name, version, source, data=None):
    """A pure-Python wheel of one module `name` with `source`, and `data`
    ({"share/x/notes.txt": text}) installed under the environment's prefix,
    outside site-packages; its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source.encode(),
        **{f"{name}-{version}.data/data/{path}": text.encode() for path, text in (data or {}).items()},
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sgpu-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = out_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return path
