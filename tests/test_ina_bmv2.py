"""aggregation.p4 on one real BMv2 (simple_switch_grpc in a network namespace, ports on veths),
set up through the job API over P4Runtime, packet by packet against the reference model:
N packets in → one multicast result out (one copy per worker, addressed to it); duplicates not
double-counted; the shadow copy served on retransmit; unknown job / slot out of range / unknown
worker dropped and counted; two jobs isolated; tear-down leaves the other job working.
Skips without BMv2, root, or the compiled program."""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time

import numpy as np
import pytest

from controller.ina import quant
from controller.ina.job import JobSpec, WorkerSpec
from controller.ina.program import FLAG_RESULT, INA_UDP_PORT
from controller.ina.refswitch import ReferenceSwitch, SwitchJob
from controller.ina.wire import L2_L4_BYTES, InaPacket, decode, udp_frame
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]

SERVICE_IP, SERVICE_MAC = "10.0.0.254", "02:00:00:00:00:fe"
N = 4


def _mac(i: int) -> str:
    return f"02:00:00:00:00:{i:02x}"


def job_spec(job_id: int, ports: list[int], pool: int = 4) -> JobSpec:
    return JobSpec(job_id, tuple(WorkerSpec(w, f"10.0.0.{p}", _mac(p), 40000 + job_id, p)
                                 for w, p in enumerate(ports)), pool, SERVICE_IP, SERVICE_MAC)


class Ports:
    """Raw AF_PACKET sockets on the root-namespace ends of the switch's veths."""

    def __init__(self, sw: NetnsSwitch) -> None:
        self.socks = {}
        for p in range(1, sw.ports + 1):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((sw.peer(p), 0))
            s.setblocking(False)
            self.socks[p] = s

    def send(self, port: int, pkt: InaPacket) -> None:
        src_ip = int.from_bytes(socket.inet_aton(f"10.0.0.{port}"), "big")
        self.socks[port].send(udp_frame(pkt.encode(), src_mac=int(_mac(port).replace(":", ""), 16),
                                        dst_mac=0x0200000000FE, src_ip=src_ip, dst_ip=0x0A0000FE,
                                        sport=40000, dport=INA_UDP_PORT))

    def recv_all(self, wait_s: float = 0.8) -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {p: [] for p in self.socks}
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            r, _, _ = select.select(list(self.socks.values()), [], [], 0.05)
            for s in r:
                p = next(k for k, v in self.socks.items() if v is s)
                frame, addr = s.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING:
                    out[p].append(frame)
        return out


def _csum_ok(ip: bytes) -> bool:
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def _p(job: int, w: int, slot: int = 0, ver: int = 0, seed: int = 0) -> InaPacket:
    rng = np.random.default_rng(seed * 100 + w)
    data = rng.integers(-(2**28), 2**28, size=64, dtype=np.int64).astype(np.int32)
    return InaPacket(job, slot, ver, w, 0, 64 * slot, quant.encode_exp(int(rng.integers(-5, 5))), data)


@pytest.fixture
def bmv2(tmp_path):
    with NetnsSwitch(ports=5, device_id=7, workdir=tmp_path) as sw:
        yield sw


def test_aggregation_on_bmv2(bmv2):
    from controller.ina.p4rt import InaSwitch

    model = ReferenceSwitch(max_slots=64)

    async def go() -> None:
        async with InaSwitch("ina", bmv2.grpc_address, 7, election_id=20) as sw:
            r1 = await sw.create_job(job_spec(1, [1, 2, 3, 4]))
            r2 = await sw.create_job(job_spec(2, [1, 5]))
            assert (r1.base, r2.base) == (0, 4)
            model.add_job(1, SwitchJob(r1.base, 4, N, 2), {w: w + 1 for w in range(N)})
            model.add_job(2, SwitchJob(r2.base, 4, 2, 3), {0: 1, 1: 5})
            ports = Ports(bmv2)
            await asyncio.sleep(0.3)
            await asyncio.to_thread(ports.recv_all, 0.2)

            def step(port: int, pkt: InaPacket) -> tuple[dict[int, list[bytes]], list]:
                ports.send(port, pkt)
                return ports.recv_all(0.5), model.process(pkt, port)

            # N in (with a duplicate of worker 0 in the middle) → nothing until the last
            for w, port in ((0, 1), (1, 2), (0, 1), (2, 3)):
                got, want = await asyncio.to_thread(step, port, _p(1, w))
                assert not any(got.values()) and want == []
            got, want = await asyncio.to_thread(step, 4, _p(1, 3))
            assert sorted(p for p, fs in got.items() for _ in fs) == [1, 2, 3, 4]  # one copy each
            expect = want[0][2]
            total = sum(_p(1, w).data.astype(np.int64) for w in range(N))
            assert np.array_equal(expect.data, total.astype(np.int32))  # duplicate not re-added
            for port, frames in got.items():
                if port == 5:
                    continue
                f = frames[0]
                res = decode(f[L2_L4_BYTES:])
                assert res.flags & FLAG_RESULT and res.worker_id == port - 1
                assert np.array_equal(res.data, expect.data) and res.exp == expect.exp
                assert f[:6] == bytes.fromhex(_mac(port).replace(":", ""))
                assert socket.inet_ntoa(f[30:34]) == f"10.0.0.{port}"
                assert socket.inet_ntoa(f[26:30]) == SERVICE_IP and _csum_ok(f[14:34])
                assert struct.unpack("!HH", f[34:38]) == (INA_UDP_PORT, 40001)
            print(f"\nBMv2: 4 contributions (+1 duplicate) -> one result on ports "
                  f"{sorted(p for p, fs in got.items() if fs)}, lanes = exact int sum, exp max "
                  f"{expect.exp}")

            # shadow copy: worker 2 retransmits after completion → only port 3, same result
            got, want = await asyncio.to_thread(step, 3, _p(1, 2))
            assert [p for p, fs in got.items() for _ in fs] == [3] and len(want) == 1
            assert np.array_equal(decode(got[3][0][L2_L4_BYTES:]).data, expect.data)
            # the next round (other copy) on the same slot does not disturb the kept result
            got, _ = await asyncio.to_thread(step, 1, _p(1, 0, ver=1, seed=9))
            assert not any(got.values())
            got, _ = await asyncio.to_thread(step, 4, _p(1, 3))
            assert [p for p, fs in got.items() for _ in fs] == [4]
            assert np.array_equal(decode(got[4][0][L2_L4_BYTES:]).data, expect.data)

            # job 2 uses slot 0 too: its own cells, its own group
            for w, port in ((0, 1), (1, 5)):
                got, want = await asyncio.to_thread(step, port, _p(2, w, seed=3))
            assert sorted(p for p, fs in got.items() for _ in fs) == [1, 5]
            assert np.array_equal(decode(got[5][0][L2_L4_BYTES:]).data, want[0][2].data)

            # bad packets: dropped and counted, nothing out
            for port, pkt in ((1, _p(9, 0)), (1, _p(1, 0, slot=4)), (2, _p(1, 0)), (5, _p(1, 3))):
                got, _ = await asyncio.to_thread(step, port, pkt)
                assert not any(got.values())
            drops = await sw.drops()
            assert drops["unknown_job"] == 1 and drops["slot_out_of_range"] == 1
            assert drops["unknown_worker"] == 2  # worker 0 of job 1 is on port 1, 3 on port 4
            c1 = await sw.counters(1)
            assert c1["ina_results"] == 1 and c1["ina_duplicates"] == 3
            assert c1["ina_shadow_served"] == 2 and c1["ina_resets"] == 4
            print(f"BMv2 counters job 1: {c1}; drops: {drops}")

            # tear down job 2: job 1 untouched and still aggregates
            await sw.delete_job(2)
            assert set(await sw.jobs()) == {1}
            got, _ = await asyncio.to_thread(step, 5, _p(2, 1, slot=1))
            assert not any(got.values())
            for w in range(N):
                got, want = await asyncio.to_thread(step, w + 1, _p(1, w, slot=2, seed=5))
            assert sorted(p for p, fs in got.items() for _ in fs) == [1, 2, 3, 4]
            assert np.array_equal(decode(got[1][0][L2_L4_BYTES:]).data, want[0][2].data)
            # and job 2 can be created again, at its old region, with clean slots
            assert (await sw.create_job(job_spec(2, [1, 5]))).base == 4

    asyncio.run(go())
