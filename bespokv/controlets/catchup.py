"""Catch-up for log shipping: the messages that bring a master-slave replica up to its upstream.

Each replica of a master-slave shard keeps a *position* ``(history, seq)``: ``seq`` counts
the write batches applied, ``history`` (16 random bytes, made by the head/master when it
starts a fresh store) names the sequence they belong to. The position is stored in the
datalet under a reserved key, in the same atomic batch as the data it describes, so after
any crash the data and the position agree.

The head/master numbers each write batch, applies it, and appends it to an in-memory
:class:`ReplicationLog`. A :class:`Link` per downstream replica streams the log over one
``Peer.Replicate`` bidi stream: several entries per message, one message in flight after
another without waiting for acknowledgements (pipelined). Acknowledgements flow back on the
same stream.

Catch-up after a reconnect or restart (``feed``): the downstream reports its position.
Same history and the log still holds the entries after it -> send those. Otherwise ->
a full copy: ``SnapshotBegin(position=(H, S0))``, the datalet's contents (possibly fuzzy:
writes keep landing while it streams), ``SnapshotEnd(consistent_at=S1)``, then the entries
from ``S0+1``. Entries are blind puts/deletes, so replaying them over the fuzzy copy gives
exactly the upstream's state once the receiver reaches S1; until then it must not serve
reads (``synced`` stays false).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from bespokv.controlets.replog import Restart
from bespokv.controlets.replstore import ReplicatedStore
from bespokv.datalets.base import RESERVED_PREFIX, Op
from bespokv.errors import UnavailableError, WrongShardError
from bespokv.peers import PeerPool
from bespokv.proto import bespokv_pb2 as pb

__all__ = ["feed", "apply_message", "CatchUp", "pull", "entries_message"]


def _mutations(ops: list[Op]) -> list[pb.Mutation]:
    return [pb.Mutation(key=k, delete=True) if v is None else pb.Mutation(key=k, value=v) for k, v in ops]


def entries_message(shard: int, entries: list[tuple[int, list[Op]]], head_seq: int = 0) -> pb.ReplMessage:
    return pb.ReplMessage(
        shard=shard,
        entries=pb.Entries(
            entries=[pb.ReplEntry(seq=s, mutations=_mutations(ops)) for s, ops in entries], head_seq=head_seq
        ),
    )


async def feed(
    store: ReplicatedStore,
    shard: int,
    their: pb.Position,
    *,
    follow: bool,
    owner: object,
    chunk: int = 512,
) -> AsyncIterator[pb.ReplMessage]:
    """Messages that bring a replica at position ``their`` up to ``store`` (and beyond,
    forever, when ``follow``). Raises :class:`Restart` if ``store`` is reset meanwhile."""
    gen = store.generation
    log_ = store.log
    max_bytes = store.tuning.repl_batch_bytes
    try:
        if their.history == store.history and their.seq <= store.seq and log_.covers(their.seq) and (
            store.history or their.seq == 0
        ):
            sent = their.seq
        else:
            s0 = store.seq
            sent = s0
            log_.pin(owner, s0)
            yield pb.ReplMessage(
                shard=shard, snapshot_begin=pb.SnapshotBegin(position=pb.Position(history=store.history, seq=s0))
            )
            async for pairs in store.datalet.export(chunk):
                if store.generation != gen:
                    raise Restart("store reset during a copy")
                kvs = [pb.KeyValue(key=k, value=v) for k, v in pairs if not k.startswith(RESERVED_PREFIX)]
                if kvs:
                    yield pb.ReplMessage(shard=shard, snapshot_chunk=pb.ExportChunk(pairs=kvs))
            if store.generation != gen:
                raise Restart("store reset during a copy")
            yield pb.ReplMessage(shard=shard, snapshot_end=pb.SnapshotEnd(consistent_at=store.seq))
        while True:
            if store.generation != gen:
                raise Restart("store reset")
            log_.pin(owner, sent)
            batch = log_.after(sent, max_bytes)
            if batch:
                yield entries_message(shard, batch, store.seq)
                sent = batch[-1][0]
                continue
            if not follow:
                return
            await store.wait_change()
    finally:
        log_.unpin(owner)


class CatchUp:
    """Receiver-side progress of one upstream stream: the position that makes it exact."""

    def __init__(self, target: pb.Position) -> None:
        self.history = target.history
        self.seq = target.seq
        self.copy_position: pb.Position | None = None  # set between begin and end of a copy

    def done(self, store: ReplicatedStore) -> bool:
        return self.copy_position is None and store.history == self.history and store.seq >= self.seq


async def apply_message(store: ReplicatedStore, msg: pb.ReplMessage, progress: CatchUp) -> None:
    """Apply one replication message to ``store`` (downstream side)."""
    kind = msg.WhichOneof("body")
    if kind == "entries":
        store.head_seq_seen = max(store.head_seq_seen, msg.entries.head_seq)
        await store.apply_entries(msg.entries.entries)
    elif kind == "snapshot_begin":
        await store.begin_copy()
        pos = msg.snapshot_begin.position
        progress.copy_position = pos
        progress.history = pos.history
        progress.seq = max(progress.seq, pos.seq)
    elif kind == "snapshot_chunk":
        if progress.copy_position is None:
            raise WrongShardError("snapshot chunk outside a copy")
        await store.copy_chunk(msg.snapshot_chunk.pairs)
    elif kind == "snapshot_end":
        if progress.copy_position is None:
            raise WrongShardError("snapshot_end without snapshot_begin")
        await store.finish_copy(progress.copy_position)
        progress.seq = max(progress.seq, msg.snapshot_end.consistent_at)
        progress.copy_position = None
    else:
        raise WrongShardError(f"unexpected replication message {kind!r}")


async def pull(store: ReplicatedStore, peers: PeerPool, shard: int, source: str, me: str) -> None:
    """Bring ``store`` up to ``source``'s position as of the pull (``Peer.Pull``: the
    entries after ours from its log, or a full copy and the entries after it)."""
    call = peers.peer(source).Pull(
        pb.PullRequest(shard=shard, position=store.position(), from_node=me), metadata=peers.metadata
    )
    progress = CatchUp(store.position())
    async for msg in call:
        await apply_message(store, msg, progress)
    if progress.copy_position is not None:
        raise UnavailableError(f"shard {shard}: the pull from {source} ended in the middle of a copy")
