"""Multi-node runs across separate test hosts (network namespaces with their
own addresses and hostnames, tests/e2e/netns.py): node 0's launcher on h0,
agents on the others. A node that dies and a link that is cut are detected,
reported by name, and leave no process on any host."""
import json
import shutil
import time

import pytest

import netns
from conftest import newest_summary, python_program, sgpu_bin
from multinode import make_secret_file, read_pids, wait_for

ok, why = netns.available()
pytestmark = pytest.mark.skipif(not ok, reason=why)

PORT = 29400  # every host has its own network stack: no other test can hold it there
WRITE_PID = 'echo $$ > "$OUT_DIR/pid-$RANK"; '


def start_job(net, sgpu, tmp_path, out, program, *launch_args, extra_env=None):
    secret = make_secret_file(tmp_path / "secret")
    env = dict(sgpu.env, OUT_DIR=str(out), **(extra_env or {}))
    head = net.hosts[0]
    n = len(net.hosts)
    launcher = head.popen([sgpu_bin(), "launch", "--nnodes", n, "--node-rank", 0, "--rdzv-endpoint",
                           f"{head.address}:{PORT}", "--rdzv-secret-file", secret, "--heartbeat-timeout", "2s",
                           "--grace", "1s", *launch_args, *program], env=env, cwd=tmp_path)
    agent_env = dict(env, SGPU_RDZV_SECRET=secret.read_text().strip())
    agents = [h.popen([sgpu_bin(), "agent", "--rdzv", f"{head.address}:{PORT}", "--node-rank", h.index], env=agent_env,
                      cwd=tmp_path)
              for h in net.hosts[1:]]
    return launcher, agents


def nothing_left(net, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {h.name: h.pids() for h in net.hosts if h.pids()}
        if not left:
            return True
        time.sleep(0.05)
    raise AssertionError(f"processes left: {left}")


def test_each_host_runs_its_ranks_and_reaches_node_0(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(3) as net:
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, python_program("store_job.py")])
        stdout, err = launcher.communicate(timeout=180)
        for a in agents:
            a.communicate(timeout=30)
        assert launcher.returncode == 0, err
        assert all(a.returncode == 0 for a in agents)
        # A real torch.distributed all_reduce across the three hosts: 1+2+3.
        assert [(out / f"{r}.txt").read_text().split()[1] for r in range(3)] == ["6"] * 3
        nothing_left(net)


def test_master_addr_is_node_0s_address_on_the_hosts_network(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(2) as net:
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, python_program("dump_env.py")])
        stdout, err = launcher.communicate(timeout=120)
        agents[0].communicate(timeout=30)
        assert launcher.returncode == 0, err
        envs = [json.loads((out / f"env-{r}.json").read_text()) for r in range(2)]
        assert [e["MASTER_ADDR"] for e in envs] == [net.hosts[0].address] * 2
        assert [e["NODE_RANK"] for e in envs] == ["0", "1"]


def test_a_host_that_dies_is_detected_and_nothing_is_left_anywhere(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(3) as net:
        program = ["--nproc", 2, "--no-python", "sh", "-c", WRITE_PID + "echo up; exec sleep 60"]
        launcher, agents = start_job(net, sgpu, tmp_path, out, program)
        read_pids(out, range(6))
        t0 = time.monotonic()
        net.hosts[2].kill_all()  # the agent and its ranks, all at once
        stdout, err = launcher.communicate(timeout=30)
        assert launcher.returncode == 1, err
        assert "node h2 was lost" in err
        assert time.monotonic() - t0 < 2.5  # the kernel closed its connection: no need to wait for heartbeats
        assert stdout.count("] up") == 6 and "[h1:2] up" in stdout and "[h2:5] up" in stdout
        nothing_left(net)


def test_a_cut_link_is_detected_by_heartbeats_on_both_sides(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(3) as net:
        program = ["--nproc", 1, "--no-python", "sh", "-c", WRITE_PID + "exec sleep 60"]
        launcher, agents = start_job(net, sgpu, tmp_path, out, program)
        read_pids(out, range(3))
        t0 = time.monotonic()
        net.cut(net.hosts[2])  # packets vanish: no reset, no end of file
        _, err = launcher.communicate(timeout=30)
        detected = time.monotonic() - t0
        assert launcher.returncode == 1, err
        assert "node h2 was lost: no message for 2s (--heartbeat-timeout)" in err
        assert 1.5 < detected < 5
        # The cut-off agent notices its launcher is gone, stops its rank and exits.
        _, agent_err = agents[1].communicate(timeout=30)
        assert time.monotonic() - t0 < 5
        assert agents[1].returncode == 1
        assert "lost the launcher" in agent_err
        _, ok_err = agents[0].communicate(timeout=30)
        assert agents[0].returncode == 1, ok_err
        nothing_left(net)


def test_hosts_sharing_a_hostname_on_127_0_1_1_run_gloo_without_an_interface_set_by_hand(sgpu, tmp_path):
    # Each host's own name resolves to 127.0.1.1 there, and each has a second
    # interface that reaches no other host: gloo, left to choose, binds where
    # its hostname resolves (loopback) and the job hangs in init_process_group.
    # sgpu gives each node the interface its kernel routes MASTER_ADDR through.
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(2, hostname="gpu-node", second_net=True) as net:
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, "--timeout", "90s",
                                                                python_program("store_job.py")])
        _, err = launcher.communicate(timeout=120)
        agents[0].communicate(timeout=30)
        assert launcher.returncode == 0, err
        assert [(out / f"{r}.txt").read_text().split()[1] for r in range(2)] == ["3"] * 2  # 1+2, over eth0
        nothing_left(net)


def test_the_users_own_socket_interface_wins(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(2, second_net=True) as net:
        # NCCL's exclusion list, which gloo cannot read, in the environment of every node
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, python_program("dump_env.py")],
                                     extra_env={"NCCL_SOCKET_IFNAME": "^docker,lo"})
        _, err = launcher.communicate(timeout=120)
        agents[0].communicate(timeout=30)
        assert launcher.returncode == 0, err
        envs = [json.loads((out / f"env-{r}.json").read_text()) for r in range(2)]
        assert [e["NCCL_SOCKET_IFNAME"] for e in envs] == ["^docker,lo"] * 2  # the user's, as given
        assert [e["GLOO_SOCKET_IFNAME"] for e in envs] == ["eth0"] * 2  # a concrete name it allows


def test_a_node_that_cannot_reach_master_addr_is_named_before_any_rank_starts(sgpu, tmp_path):
    # MASTER_ADDR on node 0's second network, which no other host reaches:
    # init_process_group would hang until its timeout; the check before the
    # start names the node and what failed, and no rank runs anywhere.
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(2, second_net=True) as net:
        t0 = time.monotonic()
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, python_program("dump_env.py")],
                                     "--master-addr", "192.168.100.1")
        _, err = launcher.communicate(timeout=60)
        _, agent_err = agents[0].communicate(timeout=30)
        assert launcher.returncode == 1, err
        assert agents[0].returncode == 1, agent_err
        assert "node 1 (h1) cannot reach 192.168.100.1:" in err, err
        assert "no rank was started" in err, err
        assert time.monotonic() - t0 < 30
        assert list(out.iterdir()) == []  # no rank ran, on either host
        nothing_left(net)


def test_the_summary_says_how_each_node_reaches_master_addr(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(2, second_net=True) as net:
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, python_program("dump_env.py")])
        _, err = launcher.communicate(timeout=120)
        agents[0].communicate(timeout=30)
        assert launcher.returncode == 0, err
        routes = newest_summary(sgpu.env)["spec"]["routes"]
        assert [(r["node"], r["interface"]) for r in routes] == [("h0", "eth0"), ("h1", "eth0")], routes
        assert all(r["connect_ms"] < 1000 for r in routes), routes


def test_explain_network_prints_each_nodes_route_and_starts_no_rank(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with netns.TestNet(2, hostname="gpu-node", second_net=True) as net:
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--explain-network", "-o", "json"])
        stdout, err = launcher.communicate(timeout=60)
        _, agent_err = agents[0].communicate(timeout=30)
        assert launcher.returncode == 0, err
        assert agents[0].returncode == 0, agent_err
        doc = json.loads(stdout)
        assert doc["master_addr"] == net.hosts[0].address and doc["reachable"] is True
        # Both hosts say gpu-node: the names are told apart, and each node's
        # ranks would get eth0 (the route to MASTER_ADDR), not eth1 or lo.
        assert [(n["node_rank"], n["name"], n["interface"], n["NCCL_SOCKET_IFNAME"], n["GLOO_SOCKET_IFNAME"])
                for n in doc["nodes"]] == [(0, "gpu-node#0", "eth0", "eth0", "eth0"),
                                           (1, "gpu-node#1", "eth0", "eth0", "eth0")], doc
        assert doc["nodes"][0]["connect_ms"] is None and 0 < doc["nodes"][1]["connect_ms"] < 1000
        # Each agent reported its node's network at Join: both interfaces, up,
        # with their addresses, and the hostname's loopback address.
        for node, host in zip(doc["nodes"], net.hosts):
            by_name = {i["name"]: i for i in node["interfaces"]}
            assert by_name["eth0"]["up"] and by_name["eth0"]["kind"] == "ether", node
            assert host.address in by_name["eth0"]["addresses"], node
            assert by_name["eth1"]["up"] and by_name["eth1"]["mtu"] > 0, node
            assert by_name["lo"]["kind"] == "loopback", node
            assert node["hostname"] == "gpu-node" and node["hostname_resolves_to"] == "127.0.1.1", node
            assert node["rdma"] == []
        assert list(out.iterdir()) == []  # no rank ran
        nothing_left(net)


def test_a_firewall_dropping_master_port_is_named_before_any_rank_starts(sgpu, tmp_path):
    # h1 drops every packet it would send to MASTER_PORT (nftables in its own
    # namespace): the rendezvous works, init_process_group would hang.
    if shutil.which("nft") is None:
        pytest.skip("nftables is not installed (scripts/install-deps installs it)")
    out = tmp_path / "out"
    out.mkdir()
    port = 29517
    with netns.TestNet(2) as net:
        rules = f"table inet sgpu_test {{\n chain out {{\n type filter hook output priority 0;\n tcp dport {port} drop\n }}\n}}\n"
        net.hosts[1].run(["nft", "-f", "-"], input=rules, check=True)
        t0 = time.monotonic()
        launcher, agents = start_job(net, sgpu, tmp_path, out, ["--nproc", 1, python_program("dump_env.py")],
                                     "--master-port", port)
        _, err = launcher.communicate(timeout=60)
        agents[0].communicate(timeout=30)
        assert launcher.returncode == 1, err
        assert f"node 1 (h1) cannot reach {net.hosts[0].address}:{port} from eth0: no answer in 5s (a firewall?)" \
            in err, err
        assert "no rank was started" in err, err
        assert time.monotonic() - t0 < 30
        assert list(out.iterdir()) == []
        nothing_left(net)
