"""spark-pubsub maintenance as an Airflow DAG: one ``spark_pubsub.jobs maintain`` pass a minute on Spark.

Each run executes only the jobs that are due (the intervals live in the root's broker settings), so a
short schedule is cheap; a run that overlaps the previous one stands by on the root's maintenance lease.
Copy this file into the DAGs folder and set the ``spark_pubsub_home`` Airflow variable to where the
spark-pubsub sources are installed on the Spark submit host.
"""

from __future__ import annotations

from datetime import datetime

from airflow import DAG
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

with DAG(
    dag_id="spark_pubsub_maintain",
    schedule="* * * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["spark-pubsub"],
) as dag:
    SparkSubmitOperator(
        task_id="maintain",
        conn_id="spark_default",
        application="{{ var.value.spark_pubsub_home }}/spark_pubsub/jobs.py",
        application_args=["maintain", "--root", "s3://my-bucket/pubsub", "--all", "--execute"],
        name="pubsub-maintain",
    )
