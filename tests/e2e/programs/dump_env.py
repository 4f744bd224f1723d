"""Writes the rank's environment as JSON to $OUT_DIR/env-<RANK>.json."""
import json
import os

with open(os.path.join(os.environ["OUT_DIR"], f"env-{os.environ['RANK']}.json"), "w") as f:
    json.dump(dict(os.environ), f)
