"""What a data set costs per month, tiered and all-local, and where tiering starts to pay.

A tiered database pays for three things: the local SSD it keeps (its local budget),
the object storage its tables take, and its object-store requests. An all-local one
pays for its SSD alone. Storage grows with the data; requests grow with the load, not
the size. So tiering costs more on small data sets (the requests dominate) and less on
large ones (a GiB in S3 Standard is $0.023, on EBS gp3 $0.08), and the two lines cross
at one data size, the **break-even**:

    tiered(D)    = D x (tiered local bytes per data byte x SSD price
                        + bucket bytes per data byte x object-storage price)
                   + requests per second x seconds per month x request prices
    all-local(D) = D x all-local disk bytes per data byte x SSD price
    break-even   = tiered requests per month / (all-local - tiered storage per data GiB)

:class:`TieringCosts` holds one measured run (bytes on each side at the run's data size,
the tiered side's request rates) and scales it: bytes in proportion to the data (a
share-of-the-data ``local_budget`` keeps the local bytes in proportion), request rates
as measured. Prices come from one :class:`~cloudtier.metered.PriceTable`: object storage
and requests from its S3 prices, SSD from its ``ssd_gb_month`` (EBS gp3, provisioned).
Sizes in GiB (2^30 bytes), as AWS bills; a month is 730 hours.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cloudtier.metered import S3_STANDARD, SECONDS_PER_MONTH, PriceTable

__all__ = ["MonthlyCost", "TieringCosts", "monthly_cost", "request_rates", "GIB"]

GIB = float(1 << 30)
#: Request kinds billed at the PUT price (S3: PUT, COPY, POST, LIST) and at the GET price.
_PUT_CLASS = ("put", "list", "post")
_GET_CLASS = ("get", "head")


@dataclasses.dataclass(frozen=True)
class MonthlyCost:
    """Dollars per month, by what they pay for."""

    local_ssd: float = 0.0
    object_storage: float = 0.0
    puts: float = 0.0  #: PUT-class requests (PUT, LIST, POST) and DELETEs
    gets: float = 0.0  #: GET-class requests (GET, HEAD)

    @property
    def storage(self) -> float:
        return self.local_ssd + self.object_storage

    @property
    def requests(self) -> float:
        return self.puts + self.gets

    @property
    def total(self) -> float:
        return self.storage + self.requests

    def as_dict(self) -> dict[str, float]:
        return {"local_ssd": self.local_ssd, "object_storage": self.object_storage,
                "puts": self.puts, "gets": self.gets, "storage": self.storage,
                "requests": self.requests, "total": self.total}


def request_rates(requests: Mapping[str, float], seconds: float) -> dict[str, float]:
    """Requests per second by kind from counts made in ``seconds`` (byte counts and
    unknown keys are left out)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    kinds = _PUT_CLASS + _GET_CLASS + ("delete",)
    return {k: float(requests.get(k, 0)) / seconds for k in kinds if requests.get(k)}


def monthly_cost(local_bytes: float = 0.0, object_bytes: float = 0.0,
                 rates: Mapping[str, float] | None = None,
                 prices: PriceTable = S3_STANDARD) -> MonthlyCost:
    """A month of ``local_bytes`` on provisioned SSD, ``object_bytes`` in the object
    store and object-store requests at ``rates`` (per second, by kind: ``put``, ``list``,
    ``post``, ``delete``, ``get``, ``head``), at ``prices``."""
    rates = rates or {}
    month = SECONDS_PER_MONTH
    puts = (sum(rates.get(k, 0.0) for k in _PUT_CLASS) * prices.put_per_1000
            + rates.get("delete", 0.0) * prices.delete_per_1000) * month / 1000.0
    gets = sum(rates.get(k, 0.0) for k in _GET_CLASS) * prices.get_per_1000 * month / 1000.0
    return MonthlyCost(local_ssd=local_bytes / GIB * prices.ssd_gb_month,
                       object_storage=object_bytes / GIB * prices.storage_gb_month,
                       puts=puts, gets=gets)


@dataclasses.dataclass(frozen=True)
class TieringCosts:
    """One measured run, tiered against all-local, scaled to other data sizes.

    ``data_bytes``: the run's data (e.g. records x (key + value)); ``tiered_local_bytes``
    and ``tiered_object_bytes``: the tiered database's local disk and the bucket bytes it
    keeps; ``all_local_bytes``: the all-local database's disk (RocksDB's own files, say);
    ``rates``: the tiered database's object-store requests per second by kind. Costs at
    another size scale every byte count by ``size / data_bytes`` and keep the rates.
    """

    data_bytes: float
    tiered_local_bytes: float
    tiered_object_bytes: float
    all_local_bytes: float
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)
    prices: PriceTable = S3_STANDARD

    def __post_init__(self) -> None:
        if self.data_bytes <= 0:
            raise ValueError(f"data_bytes must be > 0, got {self.data_bytes}")
        for name in ("tiered_local_bytes", "tiered_object_bytes", "all_local_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def _scale(self, data_bytes: float | None) -> float:
        return 1.0 if data_bytes is None else data_bytes / self.data_bytes

    def tiered(self, data_bytes: float | None = None) -> MonthlyCost:
        """The tiered side's month at ``data_bytes`` of data (None: the measured size)."""
        k = self._scale(data_bytes)
        return monthly_cost(self.tiered_local_bytes * k, self.tiered_object_bytes * k,
                            self.rates, self.prices)

    def all_local(self, data_bytes: float | None = None) -> MonthlyCost:
        """The all-local side's month at ``data_bytes`` of data: its disk on SSD."""
        return monthly_cost(self.all_local_bytes * self._scale(data_bytes), prices=self.prices)

    def saving_per_gib(self) -> float:
        """Dollars a month each GiB of data costs less tiered than all-local (storage
        only; negative when a GiB costs more tiered)."""
        return self.all_local(GIB).storage - self.tiered(GIB).storage

    def break_even_bytes(self) -> float | None:
        """The data size from which tiered costs less per month than all-local: the
        tiered requests' month over :meth:`saving_per_gib`. 0 when tiered is cheaper at
        any size (no request cost and a positive saving); None when it never is (a GiB
        costs at least as much tiered)."""
        saving = self.saving_per_gib()
        if saving <= 0:
            return None
        return self.tiered().requests / saving * GIB
