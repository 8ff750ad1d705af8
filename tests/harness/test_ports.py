from harness.ports import free_ports, port_is_free


def test_the_ports_of_one_ensemble_are_distinct_and_free():
    # Picked one at a time, a port just released could come back for the next: an ensemble's
    # member got the same port twice and ZooKeeper refused its config (fault suite, 2026-12-01).
    for _ in range(20):
        ports = free_ports(9)
        assert len(set(ports)) == 9, ports
        assert all(port_is_free(p) for p in ports), ports
