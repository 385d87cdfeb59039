"""txmq: a transactional message broker in RocketMQ's design, with an exactly-once Spark connector."""
