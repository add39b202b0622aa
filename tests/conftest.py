"""Shared fixtures: fresh storage roots; the SparkSession fixture joins with the connector."""

from __future__ import annotations

import os
import sys

# Spark workers must run this interpreter (see DESIGN.md section 6).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
