"""The versions this release of txmq speaks and reads: the one place each is defined.

Three things carry a version, each a small integer raised by one when it changes in a way an
older release could not follow, and each with the oldest version this release still serves:

- the **store format**: what the files of a data directory hold (CommitLog records, ConsumeQueue
  entries, IndexFile, checkpoint). Recorded in the directory when it is created (`store_meta.json`,
  `store_format`); a directory without it was made before versions existed and is format 1.
- the **replication wire**: what replicas of a group say to each other (replication.proto). A
  follower's EpochEnd and Fetch requests, and the leader's answers, carry it; 0 on the wire (a
  release before versions) is 1.
- the **native wire**: what native clients and brokers say (native.proto). A native client sends
  it in the `x-txmq-native-version` and `x-txmq-native-oldest` headers; none is 1.

The rule for a peer: a release serves every peer whose version is at least its own oldest
served one, and a newer peer decides whether it can talk down (its oldest served version is no
later than ours). So neighbouring releases work together in both directions, which is what a
rolling upgrade needs; a peer too old or too new for either side is refused with both versions
named. A change of the record or queue layout is one bump of STORE_FORMAT here (and, when the
old layout can no longer be read, of STORE_FORMAT_OLDEST).
"""

from __future__ import annotations

from dataclasses import dataclass

# The store format this release writes into a new data directory, and the oldest it reads.
STORE_FORMAT = 2
STORE_FORMAT_OLDEST = 1
# 2: COMMIT by reference (commit records in TXMQ_SYS_COMMIT_REF, queue entries at their slots); a
# format-1 directory holds none and opens as is, and is raised to 2 before its first commit record
STORE_FORMAT_COMMIT_REF = 2
STORE_FORMAT_UNRECORDED = 1  # a data directory made before the format was recorded

# The replication wire: 2 added the version fields themselves (a release before them is 1).
REPLICATION_WIRE = 2
REPLICATION_WIRE_OLDEST = 1

# The native wire: 2 added the version header (a client before it is 1).
NATIVE_WIRE = 2
NATIVE_WIRE_OLDEST = 1
NATIVE_WIRE_HEADER = "x-txmq-native-version"
NATIVE_WIRE_OLDEST_HEADER = "x-txmq-native-oldest"


@dataclass(frozen=True)
class Speaks:
    """What one side of a wire speaks: its own version and the oldest it serves."""

    version: int
    oldest: int

    @classmethod
    def from_wire(cls, version: int, oldest: int) -> "Speaks":
        """A peer as its message says; 0 (a field a release before versions never sets) is 1."""
        version = version or 1
        return cls(version, oldest or version)

    def __str__(self) -> str:
        return f"{self.version}" if self.oldest == self.version else f"{self.version} (serves {self.oldest}-{self.version})"


REPLICATION = Speaks(REPLICATION_WIRE, REPLICATION_WIRE_OLDEST)
NATIVE = Speaks(NATIVE_WIRE, NATIVE_WIRE_OLDEST)


def compatible(mine: Speaks, peer: Speaks) -> bool:
    """Whether two sides can talk: each one's version is one the other serves, or the newer
    side serves the older one's (the newer side talks down)."""
    older, newer = (mine, peer) if mine.version <= peer.version else (peer, mine)
    return newer.oldest <= older.version


def store_format_readable(recorded: int) -> bool:
    return STORE_FORMAT_OLDEST <= recorded <= STORE_FORMAT
