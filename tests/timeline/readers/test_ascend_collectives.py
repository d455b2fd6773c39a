"""HCCL collectives of real Ascend captures, for matching the same call across ranks.

Every Ascend source (``kernel_details.csv``, ``trace_view.json``, the profiler database)
fills ``Timeline.collectives`` with its whole collectives: ``key`` the HCCL op name (the
same on every rank of the group), ``group`` the group, ``op`` normalised, ``nbytes`` where
the source records elements and data type. The two-rank capture (MindStudio Insight test
data, see tests/data/README.md) checks the cross-rank facts: the same keys on both ranks,
and the late rank's arrival against the other rank's own recorded wait.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from parastream.timeline.readers import ascend_db, hccl, trace_view
from parastream.timeline.readers.directory import read_dir

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "ascend"
TWO_RANKS = DATA / "msinsight_level1_text_2rank"
GROUP = "17522688603477080586"
KEYS = [f"hcom_allReduce__586_{i}_1" for i in range(4)]
#: count x 4 bytes (FP32) of the four all-reduces these runs make
SIZES = [4097000 * 4, 16781312 * 4, 37752832 * 4, 2469696 * 4]


def output(level: int, export: str) -> pathlib.Path:
    return DATA / f"msinsight_level{level}_{export}" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


@pytest.fixture(scope="module")
def ranks():
    tls = read_dir(TWO_RANKS)
    assert [tl.meta["rank"] for tl in tls] == [0, 1]
    return tls


def test_each_rank_has_the_same_collectives_by_key(ranks):
    for tl in ranks:
        c = tl.collectives
        assert c is not None and len(c) == 4
        assert c.key.tolist() == KEYS
        assert c.op.tolist() == ["allreduce"] * 4
        # kernel_details.csv names the group by the hash's last digits; the capture's
        # communication.json names it whole
        assert c.group.tolist() == [GROUP] * 4
        assert (c.end_ns > c.start_ns).all()
        assert c.seq.tolist() == [-1] * 4 and c.peer.tolist() == [-1] * 4


def test_the_late_rank_is_the_one_the_other_waited_for(ranks):
    """Rank 1 entered the first all-reduce 5.6 ms after rank 0; rank 0 recorded 5.65 ms of
    waiting for it, rank 1 almost none."""
    start = {tl.meta["rank"]: dict(zip(tl.collectives.key.tolist(),
                                       tl.collectives.start_ns.tolist())) for tl in ranks}
    skew = start[1][KEYS[0]] - start[0][KEYS[0]]
    assert skew == 1736408883737849280 - 1736408883732241563
    wait0 = ranks[0].meta["hccl_wait_ns"][KEYS[0]]
    wait1 = ranks[1].meta["hccl_wait_ns"][KEYS[0]]
    assert wait0 == 5646633 and wait1 == 32321
    assert abs(wait0 - skew) < 100_000
    # the later calls start within microseconds of each other on both ranks
    for key in KEYS[1:]:
        assert abs(start[1][key] - start[0][key]) < 20_000


def test_kernel_details_alone_names_the_group_by_its_field():
    from parastream.timeline.readers import ascend_csv

    tl = ascend_csv.read(TWO_RANKS / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
                         / "kernel_details.csv")
    assert tl.collectives.group.tolist() == ["586"] * 4
    assert tl.collectives.nbytes.tolist() == [-1] * 4


@pytest.mark.parametrize("level", (0, 1, 2))
def test_database_collectives_carry_group_and_size(level):
    tl = ascend_db.read(output(level, "db") / "ascend_pytorch_profiler_0.db")
    c = tl.collectives
    assert c is not None and len(c) == 4
    assert c.op.tolist() == ["allreduce"] * 4
    assert all(k.startswith("hcom_allReduce__") for k in c.key.tolist())
    assert len(set(c.group.tolist())) == 1 and c.group[0].startswith("90.91.105.46%")
    assert c.nbytes.tolist() == SIZES
    # the collectives are the whole collectives of the comm lane
    comm = np.isin(tl.name, [tl.names.index(k) for k in c.key.tolist()])
    assert sorted(tl.start_ns[comm].tolist()) == c.start_ns.tolist()


@pytest.mark.parametrize("level", (0, 1, 2))
def test_trace_view_collectives_carry_size_from_their_args(level):
    tl = trace_view.read(output(level, "text") / "trace_view.json.gz")
    c = tl.collectives
    assert c is not None and c.nbytes.tolist() == SIZES
    assert c.op.tolist() == ["allreduce"] * 4
    assert len(set(c.group.tolist())) == 1 and c.group[0].isdigit()


def test_database_without_data_type_enum_has_unknown_sizes(tmp_path):
    import shutil
    import sqlite3

    db = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(output(1, "db") / "ascend_pytorch_profiler_0.db", db)
    con = sqlite3.connect(db)
    con.execute("DROP TABLE ENUM_HCCL_DATA_TYPE")
    con.commit()
    con.close()
    c = ascend_db.read(db).collectives
    assert c.nbytes.tolist() == [-1] * 4 and len(c.key) == 4


def test_hcom_group_and_sizes():
    assert hccl.hcom_group("hcom_allReduce__586_0_1") == "586"
    assert hccl.hcom_group("hcom_broadcast__844_1_1") == "844"
    assert hccl.hcom_group("hcom_allReduce_") == ""
    assert hccl.hcom_group("MatMul") == ""
    assert hccl.hccl_nbytes("FP32", 4097000) == 16388000
    assert hccl.hccl_nbytes("BFP16", "3") == 6
    assert hccl.hccl_nbytes("INT8", 5) == 5
    assert hccl.hccl_nbytes("INVALID_TYPE", 5) == -1
    assert hccl.hccl_nbytes("FP16", "N/A") == -1
