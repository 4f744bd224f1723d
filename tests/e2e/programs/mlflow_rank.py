"""A rank that logs into the run sgpu created: rank 0 logs `loss` with MLflow's
own client (no run id in the code: MLFLOW_RUN_ID says which). Argument: how
rank 1 ends: "ok", "long" (ok after 1.2 s: past the second after which
sgpu sends the params and spec.json beside the job), "fail" (an error file
and exit 3), "sleep" (for the timeout)."""
import json
import os
import sys
import time

rank = int(os.environ["RANK"])
how = sys.argv[1] if len(sys.argv) > 1 else "ok"
print(f"rank {rank} in run {os.environ.get('MLFLOW_RUN_ID')}", flush=True)
if rank == 0:
    import mlflow
    mlflow.log_metric("loss", 0.25, step=1)
    print("rank 0 logged loss", flush=True)
if rank == 1 and how == "fail":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": "RuntimeError: rank 1 broke", "timestamp": int(time.time())}, f)
    print("rank 1 failing", file=sys.stderr, flush=True)
    sys.exit(3)
if rank == 1 and how == "long":
    time.sleep(1.2)
if how == "sleep":
    time.sleep(60)
