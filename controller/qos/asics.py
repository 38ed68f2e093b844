"""Switch ASIC buffer profiles, as data: every value with its source (pydantic-validated).

A switch names its ASIC in the topology (``asic:``, :mod:`controller.model.topology`); a switch
that names none uses ``generic``, today's byte-exact model (cells of one byte, no MAC/PHY or
gearbox delay, XON two lossless MTUs below XOFF), so outputs for it do not change.
:func:`controller.qos.formulas.pfc_headroom` turns a profile into headroom terms; the buffer
carve-up (:func:`controller.qos.compile.buffer_plan`) uses its XON, buffer size and shared
headroom pool; :mod:`controller.qos.asic_checks` checks a policy against it.

What each field means (the model of SONiC's dynamic buffer calculator, sonic-swss
``cfgmgr/buffer_headroom_mellanox.lua`` and ``cfgmgr/buffer_pool_mellanox.lua``):

* ``cell_bytes``: the unit the memory manager allocates; a frame occupies whole cells, so a
  burst of small frames fills more buffer than its bytes (:func:`worst_case_cell_factor`).
* ``buffer_bytes``: the packet buffer of the whole chip (None: the policy's ``buffers.size``).
* ``xon_bytes``: how far below XOFF the priority is resumed (SONiC ``xon``; "pipeline latency"
  on NVIDIA, the PPG resume hysteresis on Tofino). None: two lossless MTUs (``generic``).
* ``xon_reserved``: the XON part is reserved per lossless PG on top of XOFF (SONiC Mellanox
  ``size = xoff + xon``); otherwise it is a threshold offset inside the shared pool.
* ``mac_phy_delay_bytes``: data the MAC/PHY holds in flight on each side of the link.
* ``gearbox_delay_ns``: an external gearbox's delay (0: none on the reference platforms).
* ``shared_headroom_pool``: the ASIC can pool XOFF headroom across PGs (SONiC "shared headroom
  pool"); ``shp_max_oversubscription``: the largest ratio Σ XOFF / pool a public vendor
  configuration uses (beyond it the pool is unvalidated by anyone we can cite).
* ``system_reserved_bytes``: buffer the vendor's software reserves for itself (management pool).

A value marked ``public=False`` is not published where we could read it: its ``source`` says so
and gives the estimate's reasoning. Buffer sizes are in bytes (1 MB = 10^6 bytes) unless the
source counts cells, then cells × cell size.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

KIB = 1024  # SONiC's ASIC_TABLE counts pipeline_latency and mac_phy_delay in KiB (the Lua x1024)

SONIC_ASIC_TABLE = ("sonic-buildimage platform/mellanox/asic_table.j2 (ASIC_TABLE, in KiB as "
                    "cfgmgr/buffer_headroom_mellanox.lua multiplies by 1024)")
OPENBCM = "OpenBCM (Broadcom-Network-Switching-Software/OpenBCM)"
P4STUDIO = "open-p4studio bf-drivers src/traffic_mgr/init"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourcedInt(_Strict):
    """An integer and where it comes from; ``public=False``: an estimate (source says why)."""

    value: Annotated[int, Field(ge=0)]
    source: Annotated[str, Field(min_length=10)]
    public: bool = True


class SourcedFloat(_Strict):
    value: Annotated[float, Field(ge=0)]
    source: Annotated[str, Field(min_length=10)]
    public: bool = True


class SourcedBool(_Strict):
    value: bool
    source: Annotated[str, Field(min_length=10)]
    public: bool = True


class AsicProfile(_Strict):
    """One switch ASIC's buffer facts (see the module docstring for each field)."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$")]
    vendor: str
    cell_bytes: SourcedInt
    buffer_bytes: SourcedInt | None
    xon_bytes: SourcedInt | None
    xon_reserved: SourcedBool
    mac_phy_delay_bytes: SourcedInt
    gearbox_delay_ns: SourcedFloat
    shared_headroom_pool: SourcedBool
    shp_max_oversubscription: SourcedFloat
    system_reserved_bytes: SourcedInt

    @field_validator("cell_bytes")
    @classmethod
    def _cell(cls, v: SourcedInt) -> SourcedInt:
        if v.value < 1:
            raise ValueError("a cell holds at least one byte")
        return v

    def cells(self, n_bytes: float) -> int:
        """Bytes rounded up to whole cells, in bytes."""
        c = self.cell_bytes.value
        return math.ceil(n_bytes / c) * c

    def estimates(self) -> list[str]:
        """Names of the fields whose value is an estimate (``public=False``)."""
        return [k for k in type(self).model_fields
                if getattr(getattr(self, k), "public", True) is False]


def worst_case_cell_factor(cell_bytes: int, min_frame_bytes: int = 64) -> float:
    """Most buffer per byte any frame of at least ``min_frame_bytes`` can take: a frame of L
    bytes takes ⌈L/c⌉ cells, so the ratio ⌈L/c⌉·c/L peaks at L = 64 (⌈64/c⌉·c/64) or at
    L = c + 1 (2c/(c + 1)), whichever is larger. For c > 128 this is c/64, for 64 ≤ c ≤ 128
    it is 2c/(c + 1): the two branches of sonic-swss ``buffer_headroom_mellanox.lua``
    (``worst_case_factor``). One-byte cells give 1.

    Raises ValueError for a cell or frame below one byte.
    """
    if cell_bytes < 1 or min_frame_bytes < 1:
        raise ValueError(f"cell and frame sizes must be positive: {cell_bytes}, {min_frame_bytes}")
    at_min = math.ceil(min_frame_bytes / cell_bytes) * cell_bytes / min_frame_bytes
    at_cell_plus_one = 2 * cell_bytes / (cell_bytes + 1) if cell_bytes + 1 >= min_frame_bytes \
        else 1.0
    return max(at_min, at_cell_plus_one)


def cell_occupancy(cell_bytes: int, small_frame_percent: float) -> float:
    """Buffer per byte of arriving traffic when ``small_frame_percent`` % of it is worst-case
    small frames: (100 − p + p × worst_case_factor) / 100 (sonic-swss
    ``buffer_headroom_mellanox.lua``, ``cell_occupancy``; p is SONiC's
    ``LOSSLESS_TRAFFIC_PATTERN|small_packet_percentage``).

    Raises ValueError for a share outside 0-100 %.
    """
    if not 0 <= small_frame_percent <= 100:
        raise ValueError(f"small-frame share must be 0-100%, got {small_frame_percent}")
    wcf = worst_case_cell_factor(cell_bytes)
    return (100 - small_frame_percent + small_frame_percent * wcf) / 100


def _i(v: int, src: str, public: bool = True) -> SourcedInt:
    return SourcedInt(value=v, source=src, public=public)


def _f(v: float, src: str, public: bool = True) -> SourcedFloat:
    return SourcedFloat(value=v, source=src, public=public)


def _b(v: bool, src: str, public: bool = True) -> SourcedBool:
    return SourcedBool(value=v, source=src, public=public)


_NO_GEARBOX = _f(0.0, "no gearbox on the reference platforms; SONiC's PERIPHERAL_TABLE gives one "
                 "per platform (e.g. 9.765 KiB on MSN3800, SONiC dynamic-buffer HLD)")
_MLNX_MAC_PHY = _i(math.ceil(0.8 * KIB), f"{SONIC_ASIC_TABLE}: mac_phy_delay 0.8 KiB")
_MLNX_XON = _i(19 * KIB, f"{SONIC_ASIC_TABLE}: pipeline_latency 19 KiB, used as xon by "
               "buffer_headroom_mellanox.lua")
_MLNX_XON_RESERVED = _b(True, "sonic-swss buffer_headroom_mellanox.lua: size = xoff + xon "
                        "(without a shared headroom pool)")
_MLNX_SHP = _b(True, "sonic-swss buffer_pool_mellanox.lua: shared headroom pool (xoff of "
               "ingress_lossless_pool), over_subscribe_ratio")
_MLNX_SHP_RATIO = _f(2.0, "sonic-buildimage Mellanox SKU generator "
                     "(SHARED_HEADROOM_FACTOR = 2); no larger ratio is published")
_MLNX_RESERVED = _i(256 * KIB, "sonic-swss buffer_pool_mellanox.lua: mgmt_pool_size 256 KiB")
_NOT_RESERVED = _b(False, "XON is a resume offset inside the shared pool (no per-PG "
                   "reservation in the vendor's accounting)")
_TOFINO_SHP = _b(True, "sonic-swss buffer_check_headroom_barefoot.lua ('shared headroom pool "
                 "model is supported'); buffer_pool_barefoot.lua sizes it")
_TOFINO_SHP_RATIO = _f(round(1 / 0.7, 3), "sonic-swss buffer_pool_barefoot.lua: pool = ports x "
                       "2 PPGs x 400 cells x 0.7, i.e. 1/0.7 oversubscription")
_ESTIMATED_MAC_PHY = _i(
    math.ceil(0.8 * KIB), "not public; estimate: NVIDIA's published 0.8 KiB MAC/PHY delay "
    f"({SONIC_ASIC_TABLE}) for a chip of the same SerDes generation", public=False)
_BCM_SHP = _b(True, f"{OPENBCM} bcm56990_b0_tm_thd_internal.h: a headroom pool per ITM "
              "(THDI_HDRM_BUFFER_CELL_LIMIT_HP)")
_BCM_SHP_RATIO = _f(2.0, "not public; estimate: the ratio SONiC uses on NVIDIA (2), no "
                    "Broadcom figure is published", public=False)
_BCM_XON = _i(74 * 254, "not public (SONiC Broadcom SKUs set xon_offset per SKU file); "
              "estimate: two 9216-byte jumbo frames in 254-byte cells (74 cells)", public=False)
_NO_RESERVED = _i(0, "no fixed system pool is published for this ASIC; reserve it with "
                  "buffers.min_shared or buffers.reserved_per_port")


def _nvidia(name: str, cell: int, buffer_bytes: SourcedInt) -> AsicProfile:
    return AsicProfile(
        name=name, vendor="NVIDIA",
        cell_bytes=_i(cell, f"{SONIC_ASIC_TABLE}: cell_size {cell}"),
        buffer_bytes=buffer_bytes, xon_bytes=_MLNX_XON, xon_reserved=_MLNX_XON_RESERVED,
        mac_phy_delay_bytes=_MLNX_MAC_PHY, gearbox_delay_ns=_NO_GEARBOX,
        shared_headroom_pool=_MLNX_SHP, shp_max_oversubscription=_MLNX_SHP_RATIO,
        system_reserved_bytes=_MLNX_RESERVED)


def _broadcom(name: str, cell: SourcedInt, buffer_bytes: SourcedInt) -> AsicProfile:
    return AsicProfile(
        name=name, vendor="Broadcom", cell_bytes=cell, buffer_bytes=buffer_bytes,
        xon_bytes=_BCM_XON, xon_reserved=_NOT_RESERVED, mac_phy_delay_bytes=_ESTIMATED_MAC_PHY,
        gearbox_delay_ns=_NO_GEARBOX, shared_headroom_pool=_BCM_SHP,
        shp_max_oversubscription=_BCM_SHP_RATIO, system_reserved_bytes=_NO_RESERVED)


def _tofino(name: str, header: str, cells: int, cell: int) -> AsicProfile:
    return AsicProfile(
        name=name, vendor="Intel (Barefoot)",
        cell_bytes=_i(cell, f"{P4STUDIO}/{header}: CELL_SIZE ({cell})"),
        buffer_bytes=_i(cells * cell, f"{P4STUDIO}/{header}: BUFFER_CELLS {cells // 1024} x 1024"
                        f" cells of {cell} B"),
        xon_bytes=_i(32 * cell, f"{P4STUDIO}/{header}: WAC_DEFAULT_HYSTERESIS = 4 x 8 cells "
                     "(the PPG resume offset)"),
        xon_reserved=_NOT_RESERVED, mac_phy_delay_bytes=_ESTIMATED_MAC_PHY,
        gearbox_delay_ns=_NO_GEARBOX, shared_headroom_pool=_TOFINO_SHP,
        shp_max_oversubscription=_TOFINO_SHP_RATIO, system_reserved_bytes=_NO_RESERVED)


def _bcm_buffer(chip: str, header: str, cells_per_itm: int) -> SourcedInt:
    return _i(cells_per_itm * 254 * 2, f"{OPENBCM} {header}: {cells_per_itm} physical cells per "
              f"ITM x 254 B x 2 ITMs ({chip})")


_PROFILES: tuple[AsicProfile, ...] = (
    AsicProfile(
        name="generic", vendor="none (byte-exact model)",
        cell_bytes=_i(1, "byte accounting: no cell rounding (aifabric's model before ASIC "
                      "profiles)"),
        buffer_bytes=None, xon_bytes=None,
        xon_reserved=_b(False, "XON is not reserved: the buffer plan counts XOFF headroom only"),
        mac_phy_delay_bytes=_i(0, "not modelled (Cisco C11-542809 has no MAC/PHY term)"),
        gearbox_delay_ns=_f(0.0, "not modelled"),
        shared_headroom_pool=_b(False, "not modelled"),
        shp_max_oversubscription=_f(1.0, "no shared headroom pool"),
        system_reserved_bytes=_i(0, "not modelled")),
    _tofino("tofino1", "tm_tofino.h", 280 * 1024, 80),
    _tofino("tofino2", "tm_tof2.h", 384 * 1024, 176),
    _nvidia("spectrum1", 96, _i(16_000_000, "Mellanox Spectrum product brief (SN2000 series): "
                                "16 MB fully shared buffer")),
    _nvidia("spectrum2", 144, _i(42_000_000, "Mellanox Spectrum-2 announcement (6 July 2017) "
                                 "and SN3000 product brief: 42 MB fully shared packet buffer")),
    _nvidia("spectrum3", 144, _i(64_000_000, "NVIDIA SN4000 (Spectrum-3) product brief: 64 MB "
                                 "shared packet buffer; SONiC's Mellanox SKU generator gives "
                                 "mmu_size 59392 KiB for SN4600C")),
    _nvidia("spectrum4", 192, _i(160_000_000, "not public in a primary source we could read "
                                 "(NVIDIA says 'fully shared' without a size); estimate: the "
                                 "160 MB that secondary sources report", public=False)),
    _broadcom("tomahawk3", _i(254, f"{OPENBCM} soc/tomahawk3.h: _TH3_MMU_BYTES_PER_CELL 254"),
              _bcm_buffer("BCM56980", "soc/tomahawk3.h _TH3_MMU_PHYSICAL_CELLS_PER_ITM", 139264)),
    _broadcom("tomahawk4", _i(254, f"{OPENBCM} bcm56990_b0_tm_thd_internal.h: "
                              "TH4_B0_MMU_BYTES_PER_CELL 254"),
              _bcm_buffer("BCM56990", "bcm56990_b0_tm_thd_internal.h "
                          "TH4_B0_MMU_PHYSICAL_CELLS_PER_ITM", 243712)),
    _broadcom("tomahawk5", _i(254, "not public (no Tomahawk 5 SDK header is published); "
                              "estimate: the 254-byte cell of Tomahawk 3, Tomahawk 4 and "
                              "Trident 4", public=False),
              _i(165_000_000, "not public in a primary source we could read; estimate: about "
                 "165 MB as trade press reports, above Tomahawk 4's 124 MB", public=False)),
    _broadcom("trident4", _i(254, f"{OPENBCM} bcm56880_a0_tm_thd_internal.h: "
                             "TD4_MMU_BYTES_PER_CELL 254"),
              _bcm_buffer("BCM56880; 2 ITMs assumed as on Tomahawk 3/4",
                          "bcm56880_a0_tm_thd_internal.h BCM56880_A0_MMU_PHYSICAL_CELLS_PER_ITM",
                          278528)),
)

GENERIC = "generic"


@cache
def profiles() -> dict[str, AsicProfile]:
    """Every profile by name (``generic`` first)."""
    return {p.name: p for p in _PROFILES}


def profile(name: str | None) -> AsicProfile:
    """The profile named ``name`` (None: ``generic``).

    Raises
    ------
    KeyError
        No such profile (the message lists the known ones).
    """
    try:
        return profiles()[name or GENERIC]
    except KeyError:
        raise KeyError(f"unknown ASIC {name!r}; known: {', '.join(profiles())}") from None
