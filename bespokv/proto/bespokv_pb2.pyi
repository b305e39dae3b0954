from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetRequest(_message.Message):
    __slots__ = ("key", "shard", "local")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    shard: int
    local: bool
    def __init__(self, key: _Optional[bytes] = ..., shard: _Optional[int] = ..., local: _Optional[bool] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "value")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("key", "value", "shard")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    shard: int
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., shard: _Optional[int] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key", "shard")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    shard: int
    def __init__(self, key: _Optional[bytes] = ..., shard: _Optional[int] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Mutation(_message.Message):
    __slots__ = ("key", "value", "delete")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    delete: bool
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., delete: _Optional[bool] = ...) -> None: ...

class BatchRequest(_message.Message):
    __slots__ = ("mutations", "shard")
    MUTATIONS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    mutations: _containers.RepeatedCompositeFieldContainer[Mutation]
    shard: int
    def __init__(self, mutations: _Optional[_Iterable[_Union[Mutation, _Mapping]]] = ..., shard: _Optional[int] = ...) -> None: ...

class BatchResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CasRequest(_message.Message):
    __slots__ = ("key", "expected", "value", "shard")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    expected: bytes
    value: bytes
    shard: int
    def __init__(self, key: _Optional[bytes] = ..., expected: _Optional[bytes] = ..., value: _Optional[bytes] = ..., shard: _Optional[int] = ...) -> None: ...

class CasResponse(_message.Message):
    __slots__ = ("succeeded", "found", "current")
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    succeeded: bool
    found: bool
    current: bytes
    def __init__(self, succeeded: _Optional[bool] = ..., found: _Optional[bool] = ..., current: _Optional[bytes] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("start", "end", "limit", "reverse", "shard", "local")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    start: bytes
    end: bytes
    limit: int
    reverse: bool
    shard: int
    local: bool
    def __init__(self, start: _Optional[bytes] = ..., end: _Optional[bytes] = ..., limit: _Optional[int] = ..., reverse: _Optional[bool] = ..., shard: _Optional[int] = ..., local: _Optional[bool] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ("pairs",)
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    pairs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    def __init__(self, pairs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...) -> None: ...

class Op(_message.Message):
    __slots__ = ("get", "put", "delete", "batch", "cas")
    GET_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CAS_FIELD_NUMBER: _ClassVar[int]
    get: GetRequest
    put: PutRequest
    delete: DeleteRequest
    batch: BatchRequest
    cas: CasRequest
    def __init__(self, get: _Optional[_Union[GetRequest, _Mapping]] = ..., put: _Optional[_Union[PutRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ..., batch: _Optional[_Union[BatchRequest, _Mapping]] = ..., cas: _Optional[_Union[CasRequest, _Mapping]] = ...) -> None: ...

class OpStatus(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class OpResult(_message.Message):
    __slots__ = ("status", "get", "cas")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    CAS_FIELD_NUMBER: _ClassVar[int]
    status: OpStatus
    get: GetResponse
    cas: CasResponse
    def __init__(self, status: _Optional[_Union[OpStatus, _Mapping]] = ..., get: _Optional[_Union[GetResponse, _Mapping]] = ..., cas: _Optional[_Union[CasResponse, _Mapping]] = ...) -> None: ...

class MultiRequest(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[Op]
    def __init__(self, ops: _Optional[_Iterable[_Union[Op, _Mapping]]] = ...) -> None: ...

class MultiResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[OpResult]
    def __init__(self, results: _Optional[_Iterable[_Union[OpResult, _Mapping]]] = ...) -> None: ...

class ShardMapRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeEntry(_message.Message):
    __slots__ = ("id", "address")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class ShardEntry(_message.Message):
    __slots__ = ("id", "mode", "replicas", "epoch")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    id: int
    mode: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    epoch: int
    def __init__(self, id: _Optional[int] = ..., mode: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., epoch: _Optional[int] = ...) -> None: ...

class ShardMapResponse(_message.Message):
    __slots__ = ("epoch", "cluster", "vnodes", "nodes", "shards", "down")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    VNODES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    DOWN_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    cluster: str
    vnodes: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeEntry]
    shards: _containers.RepeatedCompositeFieldContainer[ShardEntry]
    down: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, epoch: _Optional[int] = ..., cluster: _Optional[str] = ..., vnodes: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeEntry, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardEntry, _Mapping]]] = ..., down: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShardStatus(_message.Message):
    __slots__ = ("shard", "mode", "role", "ready", "seq", "lag", "info")
    class LagEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class InfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SHARD_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    shard: int
    mode: str
    role: str
    ready: bool
    seq: int
    lag: _containers.ScalarMap[str, int]
    info: _containers.ScalarMap[str, str]
    def __init__(self, shard: _Optional[int] = ..., mode: _Optional[str] = ..., role: _Optional[str] = ..., ready: _Optional[bool] = ..., seq: _Optional[int] = ..., lag: _Optional[_Mapping[str, int]] = ..., info: _Optional[_Mapping[str, str]] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("id", "address", "up", "uptime_s", "pid", "datalet", "counters", "shards", "error", "redis", "redis_cluster")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    DATALET_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REDIS_FIELD_NUMBER: _ClassVar[int]
    REDIS_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    up: bool
    uptime_s: float
    pid: int
    datalet: str
    counters: _containers.ScalarMap[str, float]
    shards: _containers.RepeatedCompositeFieldContainer[ShardStatus]
    error: str
    redis: str
    redis_cluster: str
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., up: _Optional[bool] = ..., uptime_s: _Optional[float] = ..., pid: _Optional[int] = ..., datalet: _Optional[str] = ..., counters: _Optional[_Mapping[str, float]] = ..., shards: _Optional[_Iterable[_Union[ShardStatus, _Mapping]]] = ..., error: _Optional[str] = ..., redis: _Optional[str] = ..., redis_cluster: _Optional[str] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterStatusResponse(_message.Message):
    __slots__ = ("cluster", "epoch", "nodes")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    epoch: int
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    def __init__(self, cluster: _Optional[str] = ..., epoch: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ...) -> None: ...

class Position(_message.Message):
    __slots__ = ("history", "seq")
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    history: bytes
    seq: int
    def __init__(self, history: _Optional[bytes] = ..., seq: _Optional[int] = ...) -> None: ...

class ReplEntry(_message.Message):
    __slots__ = ("seq", "mutations")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MUTATIONS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    mutations: _containers.RepeatedCompositeFieldContainer[Mutation]
    def __init__(self, seq: _Optional[int] = ..., mutations: _Optional[_Iterable[_Union[Mutation, _Mapping]]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("from_node", "position", "epoch")
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    from_node: str
    position: Position
    epoch: int
    def __init__(self, from_node: _Optional[str] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class Entries(_message.Message):
    __slots__ = ("entries", "head_seq")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ReplEntry]
    head_seq: int
    def __init__(self, entries: _Optional[_Iterable[_Union[ReplEntry, _Mapping]]] = ..., head_seq: _Optional[int] = ...) -> None: ...

class SnapshotBegin(_message.Message):
    __slots__ = ("position",)
    POSITION_FIELD_NUMBER: _ClassVar[int]
    position: Position
    def __init__(self, position: _Optional[_Union[Position, _Mapping]] = ...) -> None: ...

class SnapshotEnd(_message.Message):
    __slots__ = ("consistent_at",)
    CONSISTENT_AT_FIELD_NUMBER: _ClassVar[int]
    consistent_at: int
    def __init__(self, consistent_at: _Optional[int] = ...) -> None: ...

class ExportChunk(_message.Message):
    __slots__ = ("pairs",)
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    pairs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    def __init__(self, pairs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...) -> None: ...

class ReplMessage(_message.Message):
    __slots__ = ("shard", "hello", "entries", "snapshot_begin", "snapshot_chunk", "snapshot_end")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BEGIN_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_CHUNK_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_END_FIELD_NUMBER: _ClassVar[int]
    shard: int
    hello: Hello
    entries: Entries
    snapshot_begin: SnapshotBegin
    snapshot_chunk: ExportChunk
    snapshot_end: SnapshotEnd
    def __init__(self, shard: _Optional[int] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., entries: _Optional[_Union[Entries, _Mapping]] = ..., snapshot_begin: _Optional[_Union[SnapshotBegin, _Mapping]] = ..., snapshot_chunk: _Optional[_Union[ExportChunk, _Mapping]] = ..., snapshot_end: _Optional[_Union[SnapshotEnd, _Mapping]] = ...) -> None: ...

class ReplAck(_message.Message):
    __slots__ = ("position", "acked")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    position: Position
    acked: int
    def __init__(self, position: _Optional[_Union[Position, _Mapping]] = ..., acked: _Optional[int] = ...) -> None: ...

class PositionRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    def __init__(self, shard: _Optional[int] = ...) -> None: ...

class PositionResponse(_message.Message):
    __slots__ = ("position", "ready", "head_seq_seen")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_SEEN_FIELD_NUMBER: _ClassVar[int]
    position: Position
    ready: bool
    head_seq_seen: int
    def __init__(self, position: _Optional[_Union[Position, _Mapping]] = ..., ready: _Optional[bool] = ..., head_seq_seen: _Optional[int] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("shard", "position", "from_node")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    FROM_NODE_FIELD_NUMBER: _ClassVar[int]
    shard: int
    position: Position
    from_node: str
    def __init__(self, shard: _Optional[int] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., from_node: _Optional[str] = ...) -> None: ...

class VersionedReadRequest(_message.Message):
    __slots__ = ("shard", "keys", "versions_only")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_ONLY_FIELD_NUMBER: _ClassVar[int]
    shard: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    versions_only: bool
    def __init__(self, shard: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ..., versions_only: _Optional[bool] = ...) -> None: ...

class VersionedValue(_message.Message):
    __slots__ = ("found", "data")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    found: bool
    data: bytes
    def __init__(self, found: _Optional[bool] = ..., data: _Optional[bytes] = ...) -> None: ...

class VersionedReadResponse(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[VersionedValue]
    def __init__(self, values: _Optional[_Iterable[_Union[VersionedValue, _Mapping]]] = ...) -> None: ...

class VersionedWriteRequest(_message.Message):
    __slots__ = ("shard", "entries")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    shard: int
    entries: _containers.RepeatedCompositeFieldContainer[KeyValue]
    def __init__(self, shard: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...) -> None: ...

class VersionedWriteResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: int
    def __init__(self, applied: _Optional[int] = ...) -> None: ...

class VersionedScanRequest(_message.Message):
    __slots__ = ("shard", "start", "end", "limit", "reverse")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    shard: int
    start: bytes
    end: bytes
    limit: int
    reverse: bool
    def __init__(self, shard: _Optional[int] = ..., start: _Optional[bytes] = ..., end: _Optional[bytes] = ..., limit: _Optional[int] = ..., reverse: _Optional[bool] = ...) -> None: ...

class VersionedScanResponse(_message.Message):
    __slots__ = ("pairs",)
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    pairs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    def __init__(self, pairs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ...) -> None: ...

class DigestRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    def __init__(self, shard: _Optional[int] = ...) -> None: ...

class DigestResponse(_message.Message):
    __slots__ = ("digests",)
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, digests: _Optional[_Iterable[int]] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("shard", "buckets")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    buckets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, shard: _Optional[int] = ..., buckets: _Optional[_Iterable[int]] = ...) -> None: ...
