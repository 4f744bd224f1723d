"""What MLflow's Python client sees, as one JSON document on stdout.
  mlflow_query.py run RUN_ID     info, params, tags, metrics (with steps), artifacts
  mlflow_query.py parent         creates a run to nest under; prints its id and experiment
  mlflow_query.py runs NAME      the ids of the runs in experiment NAME ([] when it does not exist)"""
import json
import sys

from mlflow.tracking import MlflowClient

client = MlflowClient()
if sys.argv[1] == "parent":
    run = client.create_run("0", run_name="parent")
    print(json.dumps({"run_id": run.info.run_id, "experiment_id": run.info.experiment_id}))
    sys.exit(0)

if sys.argv[1] == "runs":
    experiment = client.get_experiment_by_name(sys.argv[2])
    found = client.search_runs([experiment.experiment_id]) if experiment else []
    print(json.dumps([r.info.run_id for r in found]))
    sys.exit(0)

run = client.get_run(sys.argv[2])


def artifacts(path=None):
    out = []
    for f in client.list_artifacts(run.info.run_id, path):
        out += artifacts(f.path) if f.is_dir else [f.path]
    return out


metrics = {key: sorted([m.step, m.value] for m in client.get_metric_history(run.info.run_id, key))
           for key in run.data.metrics}
experiment = client.get_experiment(run.info.experiment_id)
print(json.dumps({
    "status": run.info.status, "run_name": run.info.run_name, "experiment_id": run.info.experiment_id,
    "experiment_name": experiment.name, "start_time": run.info.start_time, "end_time": run.info.end_time,
    "params": run.data.params, "tags": run.data.tags, "metrics": metrics, "artifacts": sorted(artifacts()),
    "summary": json.loads(open(client.download_artifacts(run.info.run_id, "summary.json")).read())
    if "summary.json" in artifacts() else None,
}))
