//! Balancing, usability, leases and slowstart, on backends built by hand.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_config::{
    AdminState, Backend, Balance, CheckKind, Config, Global, HealthCheck, HttpReuse, Mode, Server, Timeouts,
};

use super::{BackendState, Backends};

/// A ready, unchecked server on 127.0.0.1:`port`.
pub(crate) fn server_config(name: &str, port: u16, weight: u32) -> Server {
    Server {
        name: name.to_owned(),
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        weight,
        check: false,
        slowstart: None,
        max_connections: None,
        state: AdminState::Ready,
    }
}

/// A backend with TCP checks every 2 s (rise 2, fall 3) and a 1 s check timeout.
pub(crate) fn backend_config(name: &str, balance: Balance, servers: Vec<Server>) -> Backend {
    let s = Duration::from_secs(1);
    Backend {
        name: name.to_owned(),
        mode: Mode::Http,
        balance,
        servers,
        health_check: HealthCheck { kind: CheckKind::Tcp, interval: Duration::from_secs(2), rise: 2, fall: 3 },
        timeouts: Timeouts {
            connect: s,
            client: s,
            server: s,
            http_request: s,
            http_keep_alive: s,
            check: s,
            tunnel: s,
        },
        retries: 3,
        redispatch: true,
        http_reuse: HttpReuse::Never,
    }
}

/// A config with no frontends and these backends.
pub(crate) fn config_with(backends: Vec<Backend>) -> Config {
    Config {
        global: Global { max_connections: 100, ..Global::default() },
        frontends: Vec::new(),
        backends,
        policy: Default::default(),
        tables: Vec::new(),
    }
}

fn backend(balance: Balance, weights: &[u32]) -> Arc<BackendState> {
    let servers =
        weights.iter().enumerate().map(|(i, &w)| server_config(&format!("s{i}"), 8000 + i as u16, w)).collect();
    Arc::new(BackendState::new(backend_config("be", balance, servers)))
}

/// How many of `n` picks (each released at once) went to each server.
fn distribution(be: &Arc<BackendState>, n: usize) -> Vec<usize> {
    let mut counts = vec![0; be.servers().len()];
    for _ in 0..n {
        let lease = be.pick(&[]).expect("a server");
        counts[lease.server().index()] += 1;
    }
    counts
}

fn picked(be: &Arc<BackendState>, avoid: &[usize]) -> Option<usize> {
    be.pick(avoid).map(|l| l.server().index())
}

#[test]
fn leastconn_picks_the_least_loaded() {
    let be = backend(Balance::LeastConn, &[1, 1, 1]);
    let held: Vec<_> = (0..3).map(|_| be.pick(&[]).expect("a server")).collect();
    let mut indexes: Vec<usize> = held.iter().map(|l| l.server().index()).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, [0, 1, 2], "one each while all are busy");

    // Free s1: it is the least loaded, every time.
    let held: Vec<_> = held.into_iter().filter(|l| l.server().index() != 1).collect();
    for _ in 0..5 {
        assert_eq!(picked(&be, &[]), Some(1));
    }
    // Load s1 with two: the others (one each) come first.
    let extra = [be.pick(&[]).expect("a server"), be.pick(&[]).expect("a server")];
    assert_eq!(extra[0].server().index(), 1);
    assert_ne!(extra[1].server().index(), 1);
    drop(held);
}

#[test]
fn leastconn_weighs_connections() {
    // Weights 1 and 3: s1 takes 3 connections for each of s0's.
    let be = backend(Balance::LeastConn, &[1, 3]);
    let held: Vec<_> = (0..8).map(|_| be.pick(&[]).expect("a server")).collect();
    let on = |i: usize| held.iter().filter(|l| l.server().index() == i).count();
    assert_eq!((on(0), on(1)), (2, 6));
}

#[test]
fn leastconn_spreads_ties() {
    let be = backend(Balance::LeastConn, &[1, 1, 1]);
    assert_eq!(distribution(&be, 30), [10, 10, 10]);
    // Sequential picks rotate rather than always taking the first.
    let order: Vec<_> = (0..6).filter_map(|_| picked(&be, &[])).collect();
    assert_eq!(order, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn leastconn_spreads_ties_among_a_subset() {
    let be = backend(Balance::LeastConn, &[1, 1, 1]);
    let busy = be.servers()[1].clone();
    let _held = loop {
        let lease = be.pick(&[]).expect("a server");
        if Arc::ptr_eq(lease.server(), &busy) {
            break lease;
        }
    };
    assert_eq!(distribution(&be, 10), [5, 0, 5]);
}

#[test]
fn roundrobin_is_exactly_proportional() {
    let be = backend(Balance::RoundRobin, &[1, 2, 3]);
    assert_eq!(distribution(&be, 600), [100, 200, 300]);
    // Smooth: each cycle of 6 already has the right shares.
    assert_eq!(distribution(&be, 6), [1, 2, 3]);
}

#[test]
fn roundrobin_follows_weight_changes() {
    let be = backend(Balance::RoundRobin, &[1, 1]);
    be.servers()[1].set_weight(3);
    assert_eq!(distribution(&be, 400), [100, 300]);
    be.servers()[0].set_weight(0);
    assert_eq!(distribution(&be, 10), [0, 10]);
}

#[test]
fn avoid_list_is_honored_unless_it_leaves_nothing() {
    for balance in [Balance::LeastConn, Balance::RoundRobin] {
        let be = backend(balance, &[1, 1, 1]);
        for _ in 0..20 {
            assert_ne!(picked(&be, &[0]), Some(0));
            assert_eq!(picked(&be, &[0, 2]), Some(1));
        }
        // Everything avoided: any server is better than none.
        assert!(picked(&be, &[0, 1, 2]).is_some());
        // Avoiding the only usable one: it is still used.
        be.servers()[1].set_admin_state(AdminState::Maint);
        be.servers()[2].set_admin_state(AdminState::Maint);
        assert_eq!(picked(&be, &[0]), Some(0));
        // Out-of-range indexes are harmless.
        assert_eq!(picked(&be, &[7, 99]), Some(0));
    }
}

#[test]
fn servers_at_max_connections_are_skipped() {
    for balance in [Balance::LeastConn, Balance::RoundRobin] {
        let mut servers = vec![server_config("a", 1, 1), server_config("b", 2, 1)];
        servers[0].max_connections = Some(1);
        servers[1].max_connections = Some(2);
        let be = Arc::new(BackendState::new(backend_config("be", balance, servers)));
        let held: Vec<_> = (0..3).map(|_| be.pick(&[]).expect("room left")).collect();
        assert_eq!(be.servers()[0].current_conns(), 1);
        assert_eq!(be.servers()[1].current_conns(), 2);
        assert!(be.pick(&[]).is_none(), "all full: no queueing, no server");
        assert!(be.has_usable_server(), "full is not unusable");
        drop(held);
        assert!(be.pick(&[]).is_some());
    }
}

#[test]
fn drain_maint_and_down_servers_get_no_new_connections() {
    for balance in [Balance::LeastConn, Balance::RoundRobin] {
        let be = backend(balance, &[1, 1, 1, 1]);
        let s = be.servers();
        s[0].set_admin_state(AdminState::Drain);
        s[1].set_admin_state(AdminState::Maint);
        s[2].set_up(false, Instant::now());
        assert_eq!(distribution(&be, 10), [0, 0, 0, 10]);
        assert!(s[0].accepts_existing(), "drain keeps existing connections");
        assert!(!s[1].accepts_existing());
        assert!(!s[2].accepts_existing());
        assert!(s[3].accepts_existing());
        assert_eq!(be.active_servers(), 2);

        s[3].set_admin_state(AdminState::Drain);
        assert!(be.pick(&[]).is_none());
        assert!(!be.has_usable_server());
        s[2].set_up(true, Instant::now());
        assert_eq!(picked(&be, &[]), Some(2));
        assert!(be.has_usable_server());
    }
}

#[test]
fn weight_zero_takes_no_new_traffic() {
    for balance in [Balance::LeastConn, Balance::RoundRobin] {
        let be = backend(balance, &[0, 1]);
        assert_eq!(distribution(&be, 10), [0, 10]);
        assert!(be.servers()[0].accepts_existing(), "existing connections may continue");
        be.servers()[1].set_weight(0);
        assert!(be.pick(&[]).is_none());
        assert!(!be.has_usable_server());
    }
}

#[test]
fn weight_is_capped_at_256() {
    let be = backend(Balance::LeastConn, &[1000]);
    assert_eq!(be.servers()[0].weight(), 256);
    be.servers()[0].set_weight(300);
    assert_eq!(be.servers()[0].weight(), 256);
}

#[test]
fn slowstart_ramps_the_effective_weight() {
    let mut config = server_config("a", 1, 100);
    config.slowstart = Some(Duration::from_secs(10));
    let be = Arc::new(BackendState::new(backend_config("be", Balance::LeastConn, vec![config])));
    let s = &be.servers()[0];
    let t0 = Instant::now();
    assert_eq!(s.effective_weight(t0), 100, "full weight at process start");

    s.set_up(false, t0);
    s.set_up(true, t0);
    let at = |secs: f64| s.effective_weight(t0 + Duration::from_secs_f64(secs));
    assert_eq!(at(0.0), 1, "never 0 while ramping");
    assert_eq!(at(1.0), 10);
    assert_eq!(at(2.5), 25);
    assert_eq!(at(5.0), 50);
    assert_eq!(at(9.99), 99);
    assert_eq!(at(10.0), 100);
    assert_eq!(at(60.0), 100);
    // A clock before the start counts as the start.
    assert_eq!(s.effective_weight(t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0)), 1);

    // Small weights: max(1, …).
    s.set_weight(3);
    assert_eq!(at(1.0), 1);
    assert_eq!(at(5.0), 1);
    assert_eq!(at(7.0), 2);
    s.set_weight(0);
    assert_eq!(at(5.0), 0, "weight 0 stays 0");
}

#[test]
fn slowstart_follows_leaving_maintenance_or_drain() {
    let mut config = server_config("a", 1, 100);
    config.slowstart = Some(Duration::from_secs(100));
    let be = Arc::new(BackendState::new(backend_config("be", Balance::LeastConn, vec![config])));
    let s = &be.servers()[0];
    for from in [AdminState::Maint, AdminState::Drain] {
        s.set_admin_state(from);
        let before = Instant::now();
        s.set_admin_state(AdminState::Ready);
        // Within a second of coming back, at most 1 % of the way up.
        assert!(s.effective_weight(before + Duration::from_secs(1)) <= 2);
        assert_eq!(s.effective_weight(before + Duration::from_secs(200)), 100);
    }
    // A server without slowstart is at full weight at once.
    let plain = backend(Balance::LeastConn, &[7]);
    plain.servers()[0].set_admin_state(AdminState::Maint);
    plain.servers()[0].set_admin_state(AdminState::Ready);
    assert_eq!(plain.servers()[0].effective_weight(Instant::now()), 7);
}

#[test]
fn slowstart_weight_drives_leastconn() {
    let mut servers = vec![server_config("a", 1, 100), server_config("b", 2, 100)];
    servers[0].slowstart = Some(Duration::from_secs(100));
    let be = Arc::new(BackendState::new(backend_config("be", Balance::LeastConn, servers)));
    let t0 = Instant::now();
    be.servers()[0].set_up(false, t0);
    be.servers()[0].set_up(true, t0);
    // At 10 s, s0 has weight 10 against 100: one connection for each ten of s1's.
    let now = t0 + Duration::from_secs(10);
    let held: Vec<_> = (0..22).filter_map(|_| be.pick_at(&[], now)).collect();
    let on = |i: usize| held.iter().filter(|l| l.server().index() == i).count();
    assert_eq!((on(0), on(1)), (2, 20));
}

#[test]
fn leases_count_up_and_down() {
    let be = backend(Balance::RoundRobin, &[1, 1]);
    assert_eq!(be.current_conns(), 0);
    let a = be.pick(&[]).expect("a server");
    let b = be.pick(&[]).expect("a server");
    let c = be.pick(&[]).expect("a server");
    assert_eq!(be.current_conns(), 3);
    assert_eq!(be.servers()[0].current_conns() + be.servers()[1].current_conns(), 3);
    assert!(Arc::ptr_eq(a.backend(), &be));
    assert_eq!(a.server().current_conns(), 2, "round robin: a and c share a server");
    assert_eq!(format!("{b:?}"), "ServerLease { backend: \"be\", server: \"s1\" }");
    drop(a);
    assert_eq!(be.current_conns(), 2);
    drop((b, c));
    assert_eq!(be.current_conns(), 0);
    assert_eq!(be.servers()[0].current_conns(), 0);
    assert_eq!(be.servers()[1].current_conns(), 0);
}

#[test]
fn leases_are_exact_under_concurrency() {
    let mut servers = vec![server_config("a", 1, 1), server_config("b", 2, 1)];
    servers[0].max_connections = Some(3);
    servers[1].max_connections = Some(3);
    let be = Arc::new(BackendState::new(backend_config("be", Balance::LeastConn, servers)));
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..2000 {
                    if let Some(lease) = be.pick(&[]) {
                        assert!(lease.server().current_conns() <= 3);
                        assert!(be.current_conns() <= 6);
                    }
                }
            });
        }
    });
    assert_eq!(be.current_conns(), 0);
    assert!(be.servers().iter().all(|s| s.current_conns() == 0));
}

#[test]
fn backends_by_name_and_in_order() {
    let config = config_with(vec![
        backend_config("zeta", Balance::LeastConn, vec![server_config("z1", 1, 1)]),
        backend_config("alpha", Balance::RoundRobin, vec![server_config("a1", 2, 1)]),
    ]);
    let backends = Backends::new(&config);
    let names: Vec<_> = backends.iter().map(|b| b.name()).collect();
    assert_eq!(names, ["zeta", "alpha"]);
    let alpha = backends.get("alpha").expect("alpha");
    assert_eq!(alpha.config().balance, Balance::RoundRobin);
    assert_eq!(alpha.servers()[0].name(), "a1");
    assert_eq!(alpha.servers()[0].addr(), SocketAddr::from(([127, 0, 0, 1], 2)));
    assert!(backends.get("beta").is_none());
}

#[test]
fn servers_added_and_removed_at_run_time() {
    for balance in [Balance::RoundRobin, Balance::LeastConn] {
        let be = backend(balance, &[1, 1]);
        let added = be.add_server(server_config("s2", 8002, 2)).expect("added");
        assert_eq!(added.index(), 2, "ids follow the configured servers");
        assert!(be.add_server(server_config("s2", 8003, 1)).is_err(), "names are unique");
        // Weights 1, 1, 2: the new server takes its share (round robin: exactly half; least
        // connections with every lease released at once: the heaviest idle server wins).
        let mut counts = [0usize; 3];
        for _ in 0..400 {
            let lease = be.pick(&[]).expect("a server");
            counts[lease.server().index()] += 1;
        }
        let expected = if balance == Balance::RoundRobin { [100, 100, 200] } else { [0, 0, 400] };
        assert_eq!(counts, expected, "{balance:?}");

        // Removal: only in maint or drain, only without connections.
        assert!(be.remove_server("s0").is_err(), "ready servers are not removed");
        be.servers()[0].set_admin_state(AdminState::Drain);
        let lease = be.pick(&[0, 2]).expect("s1");
        assert_eq!(lease.server().name(), "s1");
        let held = be.servers()[2].clone();
        held.set_admin_state(AdminState::Maint);
        let pinned = {
            held.set_admin_state(AdminState::Ready);
            let lease = be.pick(&[0, 1]).expect("s2");
            held.set_admin_state(AdminState::Maint);
            lease
        };
        assert!(be.remove_server("s2").expect_err("held").contains("1 connections"));
        drop(pinned);
        let removed = be.remove_server("s2").expect("removed once idle");
        assert!(removed.is_removed());
        assert!(be.server("s2").is_none());
        assert_eq!(be.remove_server("s2").expect_err("gone"), "No such server.");
        let again = be.add_server(server_config("s2", 8002, 1)).expect("added again");
        assert_eq!(again.index(), 3, "ids are never reused");
        drop(lease);
        be.remove_server("s0").expect("a drained, idle server");
        assert_eq!(be.servers().iter().map(|s| s.name().to_owned()).collect::<Vec<_>>(), ["s1", "s2"]);
    }
}

#[test]
fn a_checked_server_added_at_run_time_starts_down() {
    let be = backend(Balance::RoundRobin, &[1]);
    let mut config = server_config("new", 8009, 1);
    config.check = true;
    let added = be.add_server(config).expect("added");
    assert!(!added.is_up(), "no traffic before its checks pass");
}

#[test]
fn downtime_adds_up_down_and_maint_periods() {
    let be = backend(Balance::RoundRobin, &[1]);
    let server = &be.servers()[0];
    assert_eq!(server.downtime(), Duration::ZERO);
    let t0 = Instant::now();
    server.set_up(false, t0);
    server.set_up(true, t0 + Duration::from_secs(2));
    assert_eq!(server.downtime(), Duration::from_secs(2));
    // Down again, then in MAINT while down: one period, open until both are over.
    let t1 = Instant::now();
    server.set_up(false, t1);
    server.set_admin_state(AdminState::Maint);
    server.set_up(true, t1 + Duration::from_secs(1));
    assert!(server.downtime() >= Duration::from_secs(2), "still in MAINT: {:?}", server.downtime());
    server.set_admin_state(AdminState::Ready);
    let total = server.downtime();
    assert!(total >= Duration::from_secs(2) && total < Duration::from_secs(3), "{total:?}");
    // Carried from a predecessor.
    server.inherit_downtime(Duration::from_secs(10));
    assert_eq!(server.downtime(), total + Duration::from_secs(10));
}

#[test]
fn backend_downtime_is_time_without_a_usable_server() {
    let be = backend(Balance::RoundRobin, &[1, 1]);
    let (s0, s1) = (be.servers()[0].clone(), be.servers()[1].clone());
    be.set_up(&s0, false, Instant::now());
    assert_eq!(be.downtime(), Duration::ZERO, "one server left: still up");
    be.set_admin_state(&s1, AdminState::Maint);
    std::thread::sleep(Duration::from_millis(20));
    assert!(be.downtime() >= Duration::from_millis(20), "{:?}", be.downtime());
    be.set_admin_state(&s1, AdminState::Ready);
    let total = be.downtime();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(be.downtime(), total, "up again: the period ended");
    // Weight 0 takes no traffic either.
    be.set_weight(&s1, 0);
    std::thread::sleep(Duration::from_millis(20));
    assert!(be.downtime() >= total + Duration::from_millis(20));
    be.set_weight(&s1, 1);
    let total = be.downtime();
    // An empty backend (all servers deleted) is down.
    be.set_admin_state(&s1, AdminState::Drain);
    assert!(be.remove_server(s1.name()).is_ok());
    std::thread::sleep(Duration::from_millis(20));
    assert!(be.downtime() >= total + Duration::from_millis(20));
}
