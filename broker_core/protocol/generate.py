"""Regenerate the committed protobuf modules from the .proto sources under proto/.

Run as `python -m txmq.broker.protocol.generate` (what `make proto` does). Every
.proto under proto/ is compiled with grpcio-tools' bundled protoc (`-I proto`),
messages only: no grpc stubs, because the server and the client build on the
method tables (`rocketmq_methods.py`, `native_methods.py`) instead. Outputs for
`proto/txmq/broker/protocol/*.proto` land in this package as `*_pb2.py`.

The generated files are committed so that users need no protoc; a test
regenerates into a temporary directory and compares (`generate_to`), so a
.proto edit without `make proto` fails the suite.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent.parent
PROTO_ROOT = REPO_ROOT / "proto"
# proto/<this prefix>/X.proto generates txmq/broker/protocol/X_pb2.py, which is this package.
PROTO_PACKAGE_PREFIX = Path("txmq/broker/protocol")


def proto_sources(proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Every .proto under proto/, relative to proto/, in a stable order."""
    return sorted(p.relative_to(proto_root) for p in proto_root.rglob("*.proto"))


def generate_to(out_dir: Path, proto_root: Path = PROTO_ROOT) -> dict[str, bytes]:
    """Compile every .proto into out_dir; return {module file name: content} of this package's modules."""
    try:  # imported late: only generation needs grpcio-tools, a development tool (the `test` extra)
        from grpc_tools import protoc
        import grpc_tools
    except ModuleNotFoundError:
        raise SystemExit("regenerating the protobuf modules needs grpcio-tools: pip install grpcio-tools "
                         "(make venv installs it)") from None

    sources = proto_sources(proto_root)
    if not sources:
        raise SystemExit(f"no .proto files under {proto_root}")
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = ["protoc", f"-I{proto_root}", f"-I{well_known}", f"--python_out={out_dir}",
            *[str(s) for s in sources]]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}: {' '.join(args)}")
    produced = out_dir / PROTO_PACKAGE_PREFIX
    return {p.name: p.read_bytes() for p in sorted(produced.glob("*_pb2.py"))}


def committed_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, bytes]:
    """The generated modules currently committed in this package."""
    return {p.name: p.read_bytes() for p in sorted(package_dir.glob("*_pb2.py"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if the committed modules differ from the .proto sources")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate_to(Path(tmp))
    if args.check:
        stale = sorted(set(fresh) ^ set(committed_modules()) |
                       {n for n in fresh if committed_modules().get(n) != fresh[n]})
        if stale:
            print("stale generated modules: " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    for name, content in fresh.items():
        target = PACKAGE_DIR / name
        if not target.exists() or target.read_bytes() != content:
            target.write_bytes(content)
            print(f"wrote {target.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
