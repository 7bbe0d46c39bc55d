"""The spur emulator over real gRPC on loopback, driven with keeper's generated stubs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2

from emulators.spur import AgentSpec, SpurEmulator, SpurEmulatorConfig
from emulators.spur.__main__ import parse_args
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

GRACE = 0.2
AGENTS = [
    AgentSpec(node="gpu-node-01"),
    AgentSpec(node="gpu-node-02", hostname="GPU-NODE-02"),
    AgentSpec(node="gpu-node-03", hostname="gpu-node-03.cluster.local"),
]


def config(**overrides: object) -> SpurEmulatorConfig:
    settings: dict[str, object] = {"agents": list(AGENTS), "kill_grace": GRACE}
    settings.update(overrides)
    return SpurEmulatorConfig(**settings)  # type: ignore[arg-type]


@pytest.fixture
async def spur() -> AsyncIterator[SpurEmulator]:
    async with SpurEmulator(config()) as emu:
        yield emu


@pytest.fixture
async def ctl(spur: SpurEmulator) -> AsyncIterator[slurm_pb2_grpc.SlurmControllerStub]:
    async with grpc.aio.insecure_channel(spur.controller_target) as channel:
        yield slurm_pb2_grpc.SlurmControllerStub(channel)


async def until(condition: Callable[[], bool], within: float = 3.0) -> None:
    # Polls: the conditions are emulator state changed by timers on the same loop.
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.01)


async def cancel(spur: SpurEmulator, node: str, job_id: int, signal: int = 0) -> None:
    async with grpc.aio.insecure_channel(spur.agent_target(node)) as channel:
        agent = slurm_pb2_grpc.SlurmAgentStub(channel)
        reply = await agent.CancelJob(
            slurm_pb2.AgentCancelJobRequest(job_id=job_id, signal=signal), timeout=2
        )
    assert reply == empty_pb2.Empty()


async def test_get_jobs_filters_and_get_job_is_not_found_once_aged_out(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    (a,) = spur.submit("train", "alice", nodes=["gpu-node-01"])
    (b,) = spur.submit("eval", "bob", nodes=["gpu-node-01", "gpu-node-02"])
    (c,) = spur.submit("idle", "alice")
    running = await ctl.GetJobs(slurm_pb2.GetJobsRequest(states=[slurm_pb2.JOB_RUNNING]))
    assert [j.job_id for j in running.jobs] == [a.job_id, b.job_id]
    by_node = await ctl.GetJobs(slurm_pb2.GetJobsRequest(nodes=["gpu-node-02"]))
    assert [j.nodelist for j in by_node.jobs] == ["gpu-node-[01-02]"]
    by_user = await ctl.GetJobs(slurm_pb2.GetJobsRequest(user="alice", job_ids=[c.job_id]))
    assert [j.name for j in by_user.jobs] == ["idle"]

    spur.complete(a.job_id)
    info = await ctl.GetJob(slurm_pb2.GetJobRequest(job_id=a.job_id))
    assert info.state == slurm_pb2.JOB_COMPLETED and info.end_time.seconds > 0
    assert spur.advance(3599) == []
    assert spur.advance(2) == [a.job_id]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ctl.GetJob(slurm_pb2.GetJobRequest(job_id=a.job_id))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_eviction_of_the_highest_ids_never_lowers_the_watermark(
    spur: SpurEmulator,
) -> None:
    tasks = spur.submit("sweep", array_size=2)
    # The array parent (id 1) is consumed and never stored.
    assert [t.job_id for t in tasks] == [2, 3]
    assert {t.array_job_id for t in tasks} == {1}
    assert 1 not in spur.cluster.jobs
    for task in tasks:
        spur.complete(task.job_id, "CANCELLED")
    spur.advance(3601)
    assert spur.cluster.jobs == {}
    assert spur.state()["next_job_id"] == 4
    assert spur.submit()[0].job_id == 4


async def test_wipe_restarts_ids_and_agents_register_again_still_holding(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    old = [spur.submit(nodes=["gpu-node-01"])[0].job_id for _ in range(3)]
    spur.wipe()
    assert spur.cluster.next_job_id == 1 and spur.cluster.jobs == {}
    assert (await ctl.GetNodes(slurm_pb2.GetNodesRequest())).nodes == []
    # The first beat after the wipe is refused, so the agent registers again.
    assert await spur.beat_now("gpu-node-01") == old
    assert spur.agent("gpu-node-01").beats[-1]["outcome"] == "not_found"
    names = [n.name for n in (await ctl.GetNodes(slurm_pb2.GetNodesRequest())).nodes]
    assert names == ["gpu-node-01"]
    # A fresh id collides with a pre-wipe holding the agent never let go of.
    assert spur.submit()[0].job_id == old[0]
    assert spur.holdings("gpu-node-01") == {job_id: 1 for job_id in old}


async def test_dispatch_shows_running_with_an_empty_nodelist_until_the_commit(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    (job,) = spur.submit(nodes=["gpu-node-02"], commit=False)
    info = await ctl.GetJob(slurm_pb2.GetJobRequest(job_id=job.job_id))
    assert info.state == slurm_pb2.JOB_RUNNING and info.nodelist == ""
    assert spur.holdings("gpu-node-02") == {job.job_id: 1}
    spur.commit(job.job_id)
    info = await ctl.GetJob(slurm_pb2.GetJobRequest(job_id=job.job_id))
    assert info.nodelist == "gpu-node-02"


async def test_agents_report_their_own_hostname_variants(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    (job,) = spur.submit(nodes=["gpu-node-02", "gpu-node-03"])
    nodes = (await ctl.GetNodes(slurm_pb2.GetNodesRequest())).nodes
    assert [n.name for n in nodes] == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    info = await ctl.GetJob(slurm_pb2.GetJobRequest(job_id=job.job_id))
    assert info.nodelist == "gpu-node-[02-03]"
    await spur.beat_all()
    agents = {a["node"]: a for a in spur.state()["agents"]}
    assert agents["gpu-node-02"]["hostname"] == "GPU-NODE-02"
    assert agents["gpu-node-03"]["hostname"] == "gpu-node-03.cluster.local"
    # What each heartbeat carried, filed under the controller's name for the node.
    assert spur.cluster.node("gpu-node-02").hostname == "GPU-NODE-02"
    assert spur.cluster.node("gpu-node-03").last_running_jobs == [job.job_id]


async def test_graceful_cancel_drops_allocations_and_sigkills_processes_after_grace(
    spur: SpurEmulator,
) -> None:
    (proc,) = spur.submit(nodes=["gpu-node-01"])
    (salloc,) = spur.submit(nodes=["gpu-node-01"], kind="allocation")
    await cancel(spur, "gpu-node-01", salloc.job_id)
    await cancel(spur, "gpu-node-01", 999)
    await cancel(spur, "gpu-node-01", proc.job_id)
    actions = [(r.job_id, r.action) for r in spur.cancels("gpu-node-01")]
    assert actions == [(salloc.job_id, "dropped"), (999, "nothing"), (proc.job_id, "sigterm")]
    # SIGTERM leaves the process held until the delayed SIGKILL.
    assert spur.holdings("gpu-node-01") == {proc.job_id: 1}
    await until(lambda: spur.cancels()[-1].followup is not None)
    assert spur.cancels()[-1].followup == "sigkill"
    assert spur.holdings("gpu-node-01") == {}


async def test_the_delayed_sigkill_spares_a_requeued_run_on_the_same_node(
    spur: SpurEmulator,
) -> None:
    (job,) = spur.submit(nodes=["gpu-node-01"])
    await cancel(spur, "gpu-node-01", job.job_id)
    # The controller reruns it on the same node before the grace runs out: attempt 2.
    spur.requeue(job.job_id, ["gpu-node-01"])
    assert spur.holdings("gpu-node-01") == {job.job_id: 2}
    record = spur.cancels()[-1]
    await until(lambda: record.followup is not None)
    assert (record.run_attempt, record.followup) == (1, "spared")
    assert spur.holdings("gpu-node-01") == {job.job_id: 2}


async def test_positive_signals_act_once(spur: SpurEmulator) -> None:
    (killed,) = spur.submit(nodes=["gpu-node-01"])
    (hupped,) = spur.submit(nodes=["gpu-node-01"])
    await cancel(spur, "gpu-node-01", killed.job_id, signal=9)
    assert spur.holdings("gpu-node-01") == {hupped.job_id: 1}
    await cancel(spur, "gpu-node-01", hupped.job_id, signal=1)
    record = spur.cancels()[-1]
    assert record.action == "signal"
    await until(lambda: record.followup is not None)
    assert record.followup == "terminated" and spur.holdings("gpu-node-01") == {}


async def test_the_cancel_log_says_whether_the_job_was_live_on_that_node(
    spur: SpurEmulator,
) -> None:
    (live,) = spur.submit(nodes=["gpu-node-01"])
    (leaked,) = spur.submit(nodes=["gpu-node-01"])
    spur.complete(leaked.job_id, leak=True)
    (moved,) = spur.submit(nodes=["gpu-node-02"])
    spur.wrong_eviction(moved.job_id, ["gpu-node-03"])
    assert spur.cluster.node("gpu-node-02").state == slurm_pb2.NODE_DOWN
    assert spur.holdings("gpu-node-02") == {moved.job_id: 1}
    assert spur.holdings("gpu-node-03") == {moved.job_id: 2}

    await cancel(spur, "gpu-node-01", live.job_id)
    await cancel(spur, "gpu-node-01", leaked.job_id)
    await cancel(spur, "gpu-node-02", moved.job_id)
    await cancel(spur, "gpu-node-03", moved.job_id)
    seen = [(r.node, r.hostname, r.job_id, r.live_here) for r in spur.cancels()]
    assert seen == [
        ("gpu-node-01", "gpu-node-01", live.job_id, True),
        ("gpu-node-01", "gpu-node-01", leaked.job_id, False),
        ("gpu-node-02", "GPU-NODE-02", moved.job_id, False),
        ("gpu-node-03", "gpu-node-03.cluster.local", moved.job_id, True),
    ]


async def test_contention_sends_empty_or_partial_heartbeats(spur: SpurEmulator) -> None:
    ids = [spur.submit(nodes=["gpu-node-01"])[0].job_id for _ in range(4)]
    spur.set_contention("gpu-node-01", "empty")
    assert await spur.beat_now("gpu-node-01") == []
    assert spur.cluster.node("gpu-node-01").last_running_jobs == []
    spur.set_contention("gpu-node-01", "partial", omit=[ids[1]])
    assert await spur.beat_now("gpu-node-01") == [ids[0], ids[2], ids[3]]
    assert spur.cluster.node("gpu-node-01").last_running_jobs == [ids[0], ids[2], ids[3]]
    spur.set_contention("gpu-node-01", "off")
    assert await spur.beat_now("gpu-node-01") == ids


async def test_heartbeat_from_an_unknown_node_is_not_found_until_it_registers(
    ctl: slurm_pb2_grpc.SlurmControllerStub,
) -> None:
    beat = slurm_pb2.HeartbeatRequest(hostname="ghost-01")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ctl.Heartbeat(beat)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "node ghost-01 not found — is the node registered?"
    reply = await ctl.RegisterAgent(slurm_pb2.RegisterAgentRequest(hostname="ghost-01", port=0))
    assert reply.accepted and reply.message == "registered"
    await ctl.Heartbeat(beat)


async def test_registration_falls_back_to_the_peer_address_and_default_port(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    await ctl.RegisterAgent(slurm_pb2.RegisterAgentRequest(hostname="ghost-02"))
    node = spur.cluster.node("ghost-02")
    assert (node.address, node.port) == ("127.0.0.1", 6818)


async def test_agents_heartbeat_on_their_own_every_interval() -> None:
    async with SpurEmulator(config(heartbeat_interval=0.05)) as spur:
        spur.submit(nodes=["gpu-node-01"])
        agent = spur.agent("gpu-node-01")
        await until(lambda: any(b["running_jobs"] == [1] for b in agent.beats))
        spur.set_down("gpu-node-01")
        count = len(agent.beats)
        await until(lambda: len(spur.agent("gpu-node-02").beats) >= 3)
        assert len(agent.beats) == count


async def test_token_mode_rejects_calls_without_the_bearer_token() -> None:
    async with SpurEmulator(config(token="s3cret")) as spur:
        async with grpc.aio.insecure_channel(spur.controller_target) as channel:
            ctl = slurm_pb2_grpc.SlurmControllerStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await ctl.GetJobs(slurm_pb2.GetJobsRequest())
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            auth = (("authorization", "Bearer s3cret"),)
            await ctl.GetJobs(slurm_pb2.GetJobsRequest(), metadata=auth)
        # The agents carry the token: they registered (a dispatch needs the node) and beat.
        (job,) = spur.submit(nodes=["gpu-node-01"])
        assert await spur.beat_now("gpu-node-01") == [job.job_id]
        assert spur.cluster.node("gpu-node-01").last_running_jobs == [job.job_id]


async def test_a_follower_serves_reads_and_redirects_writes_to_the_leader() -> None:
    async with SpurEmulator(config(follower_port=0)) as spur:
        spur.submit(nodes=["gpu-node-01"])
        async with grpc.aio.insecure_channel(spur.follower_target) as channel:
            follower = slurm_pb2_grpc.SlurmControllerStub(channel)
            jobs = await follower.GetJobs(slurm_pb2.GetJobsRequest())
            assert [j.nodelist for j in jobs.jobs] == ["gpu-node-01"]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await follower.DrainNode(slurm_pb2.DrainNodeRequest(name="gpu-node-01"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details() == "not the Raft leader"
        assert dict(err.value.trailing_metadata())["x-spur-leader"] == spur.controller_target
        assert spur.state()["drains"] == []


async def test_drain_reports_draining_while_jobs_run_and_update_checks_the_state(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    (job,) = spur.submit(nodes=["gpu-node-01"])
    busy = await ctl.DrainNode(slurm_pb2.DrainNodeRequest(name="gpu-node-01", reason="stale"))
    assert (busy.actual_state, busy.running_jobs) == ("draining", 1)
    idle = await ctl.DrainNode(slurm_pb2.DrainNodeRequest(name="gpu-node-02", reason="stale"))
    assert (idle.actual_state, idle.running_jobs) == ("drained", 0)
    spur.complete(job.job_id)
    assert spur.cluster.node("gpu-node-01").state == slurm_pb2.NODE_DRAIN

    await ctl.UpdateNode(
        slurm_pb2.UpdateNodeRequest(name="gpu-node-02", state=slurm_pb2.NODE_IDLE, reason="")
    )
    node = (await ctl.GetNodes(slurm_pb2.GetNodesRequest(nodelist="gpu-node-02"))).nodes[0]
    assert node.state == slurm_pb2.NODE_IDLE
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ctl.UpdateNode(slurm_pb2.UpdateNodeRequest(name="gpu-node-02", state=42))  # type: ignore[arg-type]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    recorded = spur.state()
    assert [d["actual_state"] for d in recorded["drains"]] == ["draining", "drained"]
    assert [u["state"] for u in recorded["updates"]] == ["NODE_IDLE"]


async def test_a_cancel_that_outlasts_the_deadline_may_still_act(spur: SpurEmulator) -> None:
    acted, ignored = (spur.submit(nodes=["gpu-node-01"], kind="allocation")[0] for _ in range(2))
    async with grpc.aio.insecure_channel(spur.agent_target("gpu-node-01")) as channel:
        agent = slurm_pb2_grpc.SlurmAgentStub(channel)
        for job, acts in ((acted, True), (ignored, False)):
            spur.set_cancel_timeout("gpu-node-01", 1.0, acts=acts)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                request = slurm_pb2.AgentCancelJobRequest(job_id=job.job_id)
                await agent.CancelJob(request, timeout=0.1)
            assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert [r.action for r in spur.cancels()] == ["dropped", "ignored"]
    assert spur.holdings("gpu-node-01") == {ignored.job_id: 0}


async def test_an_agent_restart_shows_a_new_start_time_and_may_lose_holdings(
    spur: SpurEmulator, ctl: slurm_pb2_grpc.SlurmControllerStub
) -> None:
    (job,) = spur.submit(nodes=["gpu-node-01"])

    async def started() -> int:
        nodes = (await ctl.GetNodes(slurm_pb2.GetNodesRequest(nodelist="gpu-node-01"))).nodes
        return nodes[0].slurmd_start_time.ToNanoseconds()

    before = await started()
    spur.advance(10)
    await spur.restart_agent("gpu-node-01", keep_holdings=True)
    after = await started()
    assert after > before and spur.holdings("gpu-node-01") == {job.job_id: 1}
    await spur.restart_agent("gpu-node-01", keep_holdings=False)
    assert spur.holdings("gpu-node-01") == {}


async def test_control_api_drives_jobs_and_agents_and_names_bad_input(
    spur: SpurEmulator,
) -> None:
    async with httpx.AsyncClient(base_url=spur.control_url) as http:
        made = await http.post("/jobs", json={"nodes": ["gpu-node-01"], "commit": False})
        assert made.status_code == 201
        job_id = made.json()["jobs"][0]["job_id"]
        assert (await http.post(f"/jobs/{job_id}/commit")).json()["allocated_nodes"] == [
            "gpu-node-01"
        ]
        done = await http.post(f"/jobs/{job_id}/complete", json={"state": "FAILED", "leak": True})
        assert done.json()["state"] == "JOB_FAILED"
        beat = await http.post("/agents/gpu-node-01/beat")
        assert beat.json() == {"running_jobs": [job_id]}
        assert (await http.post("/clock/advance", json={"seconds": 3601})).json()["evicted"] == [
            job_id
        ]
        added = await http.post("/agents", json={"node": "gpu-node-04", "hostname": "n4.local"})
        assert added.status_code == 201
        state = (await http.get("/state")).json()
        assert state["next_job_id"] == job_id + 1 and state["jobs"] == []
        assert [a["hostname"] for a in state["agents"]][-1] == "n4.local"
        assert state["agents"][0]["holdings"][0]["job_id"] == job_id

        bad = await http.post("/agents/gpu-node-01/contention", json={"mode": "busy"})
        assert bad.status_code == 400 and "mode" in bad.json()["error"]
        missing = await http.post("/jobs/77/complete", json={})
        assert missing.status_code == 404 and "77" in missing.json()["error"]
        nobody = await http.post("/agents/nope/beat")
        assert nobody.status_code == 404 and "nope" in nobody.json()["error"]
        assert (await http.post("/reset")).json() == {"reset": True}
        assert (await http.get("/state")).json()["agents"][0]["holdings"] == []


def test_the_command_line_builds_a_config() -> None:
    cfg = parse_args(["--scenario", "hostname-variants", "--heartbeat-interval", "0"])
    assert [a.reported_hostname for a in cfg.agents] == [
        "gpu-node-07",
        "GPU-NODE-08",
        "gpu-node-09.cluster.local",
    ]
    assert cfg.heartbeat_interval is None and cfg.controller_port == 6817
    assert len(parse_args(["--agents", "4"]).agents) == 4


async def test_silent_nodes_go_down_when_the_health_tick_is_on() -> None:
    async with SpurEmulator(config(heartbeat_timeout=90)) as spur:
        spur.advance(60)
        await spur.beat_now("gpu-node-01")
        spur.advance(60)
        states = {n.name: n.state for n in spur.cluster.nodes.values()}
        assert states["gpu-node-01"] == slurm_pb2.NODE_IDLE
        assert states["gpu-node-02"] == slurm_pb2.NODE_DOWN
        assert spur.cluster.node("gpu-node-02").state_reason == "Not responding"
        await spur.beat_now("gpu-node-02")
        assert spur.cluster.node("gpu-node-02").state == slurm_pb2.NODE_IDLE
