"""keeper's spur stubs: generated from wire/spur/slurm.proto as committed, and on spur's wire."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

from keeper.wire.spur import slurm_pb2

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("slurm_pb2.py", "slurm_pb2.pyi", "slurm_pb2_grpc.py")


def test_the_committed_stubs_are_what_make_proto_generates(tmp_path: Path) -> None:
    # As `make proto`: protoc reads the checkout as keeper/, so the stubs import keeper.wire.spur.
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "--proto_path=keeper=.",
         f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
         "keeper/wire/spur/slurm.proto"],
        cwd=ROOT, check=True,
    )  # fmt: skip
    for name in GENERATED:
        fresh = (tmp_path / "keeper/wire/spur" / name).read_text()
        committed = (ROOT / "wire/spur" / name).read_text()
        assert fresh == committed, f"wire/spur/{name} is stale: run `make proto` and commit it"


def _fields(message: str) -> dict[str, int]:
    proto = descriptor_pb2.FileDescriptorProto()
    slurm_pb2.DESCRIPTOR.CopyToProto(proto)
    (found,) = [m for m in proto.message_type if m.name == message]
    return {f.name: f.number for f in found.field}


def test_names_and_numbers_are_spurs() -> None:
    # From spur's proto/slurm.proto (docs/reclaim.md#wire-format): a changed number breaks the wire.
    assert slurm_pb2.DESCRIPTOR.package == "slurm"
    assert _fields("HeartbeatRequest") == {
        "hostname": 1, "cpu_load": 2, "free_memory_mb": 3, "running_jobs": 4,
        "node_token": 5, "wg_pubkey": 6, "k0s_status": 7,
    }  # fmt: skip
    assert _fields("RunningJobStatus") == {"job_id": 1, "state": 2, "exit_code": 3}
    assert _fields("AgentCancelJobRequest") == {"job_id": 1, "signal": 2}
    assert _fields("ReportJobStatusRequest") == {
        "job_id": 1, "state": 2, "exit_code": 3, "message": 4, "drain_node": 5,
        "drain_reason": 6, "reporting_node": 7, "signal": 8, "run_attempt": 9,
    }  # fmt: skip
    assert _fields("DrainNodeRequest") == {"name": 1, "reason": 2}
    assert _fields("RegisterAgentRequest") == {
        "hostname": 1, "resources": 2, "version": 3, "address": 4, "port": 5,
        "wg_pubkey": 6, "labels": 7, "join_token": 8,
    }  # fmt: skip
    job = _fields("JobInfo")
    assert {k: job[k] for k in ("job_id", "state", "submit_time", "end_time", "nodelist")} == {
        "job_id": 1, "state": 7, "submit_time": 10, "end_time": 12, "nodelist": 23,
    }  # fmt: skip
    assert slurm_pb2.JOB_REQUEUED == 12 and slurm_pb2.NODE_DRAIN == 4
    services = {
        s.name: [m.name for m in s.methods] for s in slurm_pb2.DESCRIPTOR.services_by_name.values()
    }
    assert set(services["SlurmController"]) == {
        "GetJobs", "GetJob", "GetNodes", "UpdateNode", "DrainNode", "Ping", "RegisterAgent",
        "Heartbeat", "ReportJobStatus",
    }  # fmt: skip
    assert services["SlurmAgent"] == ["CancelJob"]


def test_an_undeclared_field_of_spurs_survives_a_round_trip() -> None:
    # JobInfo.work_dir (24) is spur's, not declared here: a tap that re-encoded would keep it.
    # Tag 24, wire type 2, as a varint (0xC2 0x01), then the length and the bytes.
    raw = slurm_pb2.JobInfo(job_id=7).SerializeToString() + bytes([0xC2, 0x01, 4]) + b"/tmp"
    job = slurm_pb2.JobInfo.FromString(raw)
    assert job.job_id == 7 and job.SerializeToString() == raw
