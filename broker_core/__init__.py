"""txmq: a transactional message broker in RocketMQ's design, with an exactly-once Spark connector."""

# The one place the version lives: the package metadata (pyproject.toml) and `txmq --version` read it.
__version__ = "0.1.0"
