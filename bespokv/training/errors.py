"""Errors of the training apps: part of bespokv's (and so rocksmash's) one hierarchy."""

from __future__ import annotations

from bespokv.errors import Error, InvalidArgumentError

__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointExistsError",
    "CommitFailedError",
    "ChunkMissingError",
    "InvalidArgumentError",
]


class CheckpointError(Error):
    """Root of the checkpoint store's errors."""


class CheckpointNotFoundError(CheckpointError):
    """No committed checkpoint has this id (never saved, deleted, or its save never finished)."""


class CheckpointExistsError(CheckpointError):
    """A committed checkpoint, or a live save, already has this id. Delete it first."""


class CommitFailedError(CheckpointError):
    """The save's pending record changed under it (its lease ran out and a GC reaped it, or
    someone deleted it): nothing was committed; the save's chunks are collected later."""


class ChunkMissingError(CheckpointError):
    """A chunk a committed checkpoint references is absent or does not match its hash:
    the object store lost or corrupted it. Never served as data."""
