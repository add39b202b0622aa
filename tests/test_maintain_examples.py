"""The scheduling examples of ``pubsub maintain`` (docs/examples/maintain) point at real entry points:
the crontab line parses as a ``pubsub`` command, the Airflow DAG compiles and its SparkSubmitOperator
submits ``spark_pubsub/jobs.py`` with arguments the job's parser accepts, and the Databricks job's
python task parameters parse too.  Airflow is not needed: the DAG is read with ``ast``."""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

from broker_core.cli.app import build_parser as pubsub_parser
from spark_pubsub.jobs import build_parser as spark_parser

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "docs" / "examples" / "maintain"


def test_the_crontab_line_is_a_pubsub_maintain_command() -> None:
    (line,) = [x for x in (EXAMPLES / "crontab").read_text().splitlines() if x and not x.startswith("#")]
    words = shlex.split(line.split(">>")[0])[5:]  # after the five schedule fields
    assert words[0] == "pubsub"
    args = pubsub_parser().parse_args(words[1:])
    assert args.command == "maintain" and args.execute and args.all


def test_the_airflow_dag_submits_the_maintain_job() -> None:
    source = (EXAMPLES / "airflow_dag.py").read_text()
    compile(source, "airflow_dag.py", "exec")
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "SparkSubmitOperator"]
    assert len(calls) == 1
    kwargs = {k.arg: ast.literal_eval(k.value) for k in calls[0].keywords}
    application = kwargs["application"].split("}}/")[-1]
    assert (REPO / application).is_file() and application == "spark_pubsub/jobs.py"
    args = spark_parser().parse_args(kwargs["application_args"])
    assert args.command == "maintain" and args.execute


def test_the_databricks_job_runs_the_maintain_job() -> None:
    job = json.loads((EXAMPLES / "databricks_job.json").read_text())
    (task,) = job["tasks"]
    python = task["spark_python_task"]
    assert python["python_file"].endswith("/spark_pubsub/jobs.py") and (REPO / "spark_pubsub" / "jobs.py").is_file()
    args = spark_parser().parse_args(python["parameters"])
    assert args.command == "maintain" and args.execute and job["max_concurrent_runs"] == 1
