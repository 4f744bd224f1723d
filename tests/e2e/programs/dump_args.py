"""Writes the rank's arguments and environment as JSON to $OUT_DIR/args-<RANK>.json."""
import json
import os
import sys

with open(os.path.join(os.environ["OUT_DIR"], f"args-{os.environ['RANK']}.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
