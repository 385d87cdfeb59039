"""Which packages the wheel holds: every package under the folders that carry txmq's import names.

They are found, never listed: a hand-written list once left txmq.broker.store.sql92 and
txmq.broker.timer out of every wheel (issue 37). The rest of the metadata is in pyproject.toml.
"""

from setuptools import find_packages, setup

# import name -> folder: the folders keep their names, the import names are the public ones
PACKAGE_DIR = {
    "txmq.broker": "broker_core",
    "txmq.spark": "connector",
    "pyspark_txmq": "connector/autoregister/pyspark_txmq",  # Spark finds data sources by this name
}


def discovered_packages() -> list[str]:
    """Each mapped package and every package below its folder (a folder with an __init__.py)."""
    found = []
    for name, folder in PACKAGE_DIR.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


setup(package_dir=PACKAGE_DIR, packages=discovered_packages())
