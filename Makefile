# txmq — every target installs what it needs into .venv under the repo.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RMQ_VENV := .venv-rocketmq
RMQ_STAMP := $(RMQ_VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(VPY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(VPY))
PYTEST_ARGS ?=

.PHONY: chromium screenshots faketime lab venv dist etcd etcd-required demo-cluster test test-faults ci test-slow spark-cluster-test upgrade-test s3-server s3a-jars torture interop interop-venv spark-kafka-venv peers-jars proto demo bench bench-quick bench-peers clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test,bench,console]'
	@# pyspark finds `pyspark_*` data sources with pkgutil.iter_modules, which cannot see the
	@# editable-install finder: put the folder holding pyspark_txmq on sys.path as well.
	$(VPY) -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'txmq_spark_autoregister.pth').write_text('$(abspath connector/autoregister)\\n')"
	touch $(STAMP)

# The official RocketMQ 5 Python client lives in its own venv: interop tests run it as a separate process.
interop-venv: $(RMQ_STAMP)

$(RMQ_STAMP):
	test -x $(RMQ_VENV)/bin/python || $(PY) -m venv $(RMQ_VENV)
	$(RMQ_VENV)/bin/python -m pip install -q 'rocketmq-python-client==5.1.2'
	touch $(RMQ_STAMP)

# Spark's Kafka connector (spark-sql-kafka-0-10_2.13) must match pyspark's version, and Maven Central
# has none for 4.3.0: bench/vs_peers.py runs both sides of its Spark comparisons on pyspark 4.2.0 here.
SPARK_KAFKA_VENV := .venv-spark42
SPARK_KAFKA_STAMP := $(SPARK_KAFKA_VENV)/.installed

spark-kafka-venv: $(SPARK_KAFKA_STAMP)

$(SPARK_KAFKA_STAMP): pyproject.toml
	test -x $(SPARK_KAFKA_VENV)/bin/python || $(PY) -m venv $(SPARK_KAFKA_VENV)
	$(SPARK_KAFKA_VENV)/bin/python -m pip install -q --upgrade pip
	$(SPARK_KAFKA_VENV)/bin/python -m pip install -q -e '.[bench]' 'pyspark==4.2.0' 'pandas>=2.0,<3'
	$(SPARK_KAFKA_VENV)/bin/python -c "import site, pathlib; pathlib.Path(site.getsitepackages()[0], 'txmq_spark_autoregister.pth').write_text('$(abspath connector/autoregister)\\n')"
	touch $(SPARK_KAFKA_STAMP)

# Kafka and RocketMQ 5 jars from Maven Central into bench/peers/cache/ (bench/peers/pom.xml).
peers-jars: venv
	$(VPY) bench/peers_jvm.py --fetch

# etcd for broker groups (Debian's etcd-server); tests and demos start their own members.
ETCD_HINT := the etcd binary (3.4 or later) is not on PATH: install Debian/Ubuntu's etcd-server (apt-get install etcd-server) or put etcd from https://github.com/etcd-io/etcd/releases on PATH
etcd:
	@command -v etcd >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq etcd-server; \
	  else sudo -n apt-get update -qq && sudo -n apt-get install -y -qq etcd-server; fi; } \
	  || echo "$(ETCD_HINT); the cluster tests will be skipped" >&2

# libfaketime (Debian's) for the lab's clock jumps; the lab tests that need it say so when it is missing.
FAKETIME_SO := /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
faketime:
	@test -e $(FAKETIME_SO) || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq libfaketime; \
	  else sudo -n apt-get update -qq && sudo -n apt-get install -y -qq libfaketime; fi; } \
	  || echo "libfaketime could not be installed (apt-get install libfaketime): the lab's clock jumps will fail" >&2

# Debian's chromium and chromedriver for the console's browser tests (tests/console), which say so when missing.
chromium:
	@command -v chromedriver >/dev/null && command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver; \
	  else sudo -n apt-get update -qq && sudo -n apt-get install -y -qq chromium chromium-driver; fi; } \
	  || echo "chromium could not be installed (apt-get install chromium chromium-driver): the console's browser tests will be skipped" >&2

# Targets that cannot run without etcd stop here with one line saying how to get it.
etcd-required:
	@command -v etcd >/dev/null || { echo "make: $(ETCD_HINT)" >&2; exit 2; }

# The README's console pictures (docs/console*.png), taken by the console's cluster test.
screenshots: venv etcd chromium
	TXMQ_SCREENSHOTS=docs $(VPY) -m pytest -q tests/console/test_console_cluster.py -k killed_leader

# Two workers: most tests wait on brokers, etcd and clients in other processes, not on this one.
TEST_WORKERS ?= 2

test: venv interop-venv etcd faketime chromium
	$(VPY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# The proofs through faults too long for the default suite (marker `faults`: lab hosts through partitions
# and a short campaign, kill -9 matrices, crash loops), on their own workers. `-m` replaces addopts' own,
# so the expression repeats its exclusions.
FAULTS_MARKERS := faults and not torture and not slow and not lab

test-faults: venv interop-venv etcd faketime
	$(VPY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 -m '$(FAULTS_MARKERS)' $(PYTEST_ARGS)

# What CI runs (.ci/run): the default suite, then the fault proofs it leaves out, one after the other;
# the second runs even when the first failed, and either failing fails CI.
ci:
	$(MAKE) test; status=$$?; $(MAKE) test-faults && exit $$status

test-slow: venv interop-venv
	$(VPY) -m pytest -m slow $(PYTEST_ARGS)

# txmq on a Spark standalone cluster whose workers are other hosts (lab network namespaces; needs root):
# the wheel's packed environment (built once into .cache/spark-cluster/), a 200k batch read beside
# local[2], a streaming pipeline across an executor kill -9, the foreachBatch helper. ~10 min.
spark-cluster-test: venv
	$(VPY) -m pytest -m slow -s tests/spark/test_spark_on_cluster.py $(PYTEST_ARGS)

# A rolling upgrade from the previous release (its wheel built once into .cache/upgrade/) on two
# 3-replica groups around etcd under transactional load, and a downgrade; lab.checker judges it. ~3 min.
upgrade-test: venv etcd etcd-required
	$(VPY) -m pytest -m slow -s tests/upgrade $(PYTEST_ARGS)

# An S3-compatible server in memory (gofakes3, built from the Go module proxy) for the connector's
# checkpoint-on-S3 tests, cached under .cache/; the tests skip with a reason when Go is missing.
S3_SERVER := .cache/s3-server/s3server
s3-server: $(S3_SERVER)

$(S3_SERVER): tests/spark/s3server/main.go tests/spark/s3server/go.mod tests/spark/s3server/go.sum
	@command -v go >/dev/null || { echo "make: the Go toolchain (go) is not on PATH: it builds the S3 test server" >&2; exit 2; }
	mkdir -p $(dir $@) && cd tests/spark/s3server && go build -o $(abspath $@) .

# Hadoop's S3A filesystem for Spark's own s3a:// checkpoints (hadoop-aws matching pyspark's Hadoop, the AWS
# SDK bundle and the S3 analytics accelerator it needs) from Maven Central into .cache/s3a-jars/, for the
# slow checkpoint-on-S3 test.
HADOOP_AWS := org.apache.hadoop:hadoop-aws:3.5.0
AWS_BUNDLE := software.amazon.awssdk:bundle:2.35.4
S3_ANALYTICS := software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.3.1
s3a-jars: .cache/s3a-jars/.fetched-3.5.0

.cache/s3a-jars/.fetched-3.5.0:
	mkdir -p .cache/s3a-jars
	for a in $(HADOOP_AWS) $(AWS_BUNDLE) $(S3_ANALYTICS); do \
	  mvn -q dependency:copy -Dartifact=$$a -DoutputDirectory=.cache/s3a-jars || exit 1; done
	touch $@

# The official RocketMQ 5 clients (Python, Java with Maven, Go, Node.js with npm) against broker
# processes, alone. The suite builds the Java and Go drivers and installs Node's client itself
# (tests/interop/conftest.py); a client whose toolchain or download is missing is skipped.
interop: venv interop-venv
	$(VPY) -m pytest -m interop tests/interop $(PYTEST_ARGS)

# The lab (docs/lab.md): a 3-replica group, etcd and clients on hosts of their own (network namespaces,
# needs root) through every fault, several rounds each, then the lab-marked tests. Prints a verdict line;
# runs are kept in lab-runs/. LAB_ARGS e.g. "--faults leader-isolated,kill9-leader --rounds 1".
LAB_ARGS ?=

lab: venv etcd faketime
	$(VPY) -m lab.campaign $(LAB_ARGS); status=$$?; \
	  $(VPY) -m pytest -m lab tests/lab $(PYTEST_ARGS) && exit $$status

torture: venv etcd
	$(VPY) -m pytest -m torture $(PYTEST_ARGS)

# The sdist and the wheel built from it, into dist/ (docs/deploy.md installs the wheel).
dist: venv
	rm -rf dist && $(VPY) -m build --outdir dist .

proto: venv
	$(VPY) -m txmq.broker.protocol.generate

demo: venv
	$(VPY) examples/orders_points/run_demo.py $(DEMO_ARGS)

# The orders -> points pipeline on 3 groups of 3 replicas around etcd, through a leader kill.
demo-cluster: venv etcd etcd-required
	$(VPY) examples/cluster/run_demo.py

bench: venv interop-venv spark-kafka-venv peers-jars
	$(VPY) bench/run_all.py

bench-quick: venv interop-venv spark-kafka-venv peers-jars
	$(VPY) bench/run_all.py --quick

# txmq against Kafka 4 and RocketMQ 5 alone (issue #26); PEERS_ARGS=--quick for a small run.
PEERS_ARGS ?=
bench-peers: venv interop-venv spark-kafka-venv peers-jars
	$(VPY) bench/vs_peers.py $(PEERS_ARGS)

clean:
	rm -rf $(VENV) $(RMQ_VENV) $(SPARK_KAFKA_VENV) build dist *.egg-info .pytest_cache
