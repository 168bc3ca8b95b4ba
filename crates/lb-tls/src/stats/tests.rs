use super::*;

#[test]
fn failures_are_classified_from_the_library_reasons() {
    let cases = [
        ("http request", Failure::NotTls),
        ("wrong version number", Failure::NotTls),
        ("no shared cipher", Failure::Cipher),
        ("unsupported protocol", Failure::Protocol),
        ("tlsv1 alert unknown ca", Failure::Certificate),
        ("peer did not return a certificate", Failure::Certificate),
        ("tlsv1 unrecognized name (SNI nowhere.test)", Failure::Sni),
        ("clienthello tlsext; parse tlsext (SNI api.example.test)", Failure::Sni),
        ("client closed the connection", Failure::Closed),
        ("connection error: Connection reset by peer (os error 104)", Failure::Closed),
        ("decode error", Failure::Other),
    ];
    for (reason, kind) in cases {
        assert_eq!(Failure::of_reason(reason), kind, "{reason}");
    }
}

#[test]
fn totals_carry_on_across_workers_and_late_counts_are_the_difference() {
    let old = Stats::new(vec!["127.0.0.1:443".into()]);
    let fe = old.frontend(0);
    fe.opened();
    fe.handshake(false, "TLSv1.3", Some("TLS_AES_128_GCM_SHA256"));
    fe.failed(Failure::Timeout);
    let handed = old.snapshot();
    // After the hand-over, the old worker still finishes a connection.
    fe.opened();
    fe.handshake(true, "TLSv1.2", Some("ECDHE-ECDSA-AES128-GCM-SHA256"));
    fe.received_from_client(10);
    fe.sent_to_client(20);
    let late = old.snapshot().since(&handed);

    let new = Stats::new(vec!["127.0.0.1:443".into(), "127.0.0.1:8443".into()]);
    new.inherit(&handed);
    new.frontend(0).opened();
    new.frontend(0).handshake(false, "TLSv1.3", Some("TLS_AES_128_GCM_SHA256"));
    new.inherit(&late);
    let rows = new.rows();
    let (name, t, current) = &rows[0];
    assert_eq!(*name, "127.0.0.1:443");
    assert_eq!((t.connections, t.handshakes, t.resumed, *current), (3, 3, 1, 1));
    assert_eq!(t.failures[0], 1, "the timeout");
    assert_eq!(t.versions, vec![0, 0, 1, 2]);
    assert_eq!(t.ciphers.get("TLS_AES_128_GCM_SHA256"), Some(&2));
    assert_eq!((t.bytes_in, t.bytes_out), (10, 20));
    assert_eq!(t.max, 2, "a peak is the larger one, not a sum");
    assert_eq!(rows[1].1.connections, 0, "a new frontend starts at 0");
}

#[test]
fn show_stat_rows_have_as_many_cells_as_the_header() {
    let stats = Stats::new(vec!["127.0.0.1:443".into(), "unix:/run/tls.sock".into()]);
    stats.frontend(1).failed(Failure::Other);
    let process = Process { version: "0.1.0".into(), library: "AWS-LC".into(), threads: 1, max_connections: 10 };
    let csv = show_stat(&stats, &process);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3);
    let cells = |l: &str| l.split(',').count();
    assert!(lines.iter().all(|l| cells(l) == cells(lines[0])), "{csv}");
    assert!(lines[2].starts_with("unix:/run/tls.sock,FRONTEND,0,"), "{csv}");
}

#[test]
fn metric_label_values_are_escaped() {
    let stats = Stats::new(vec!["127.0.0.1:443".into()]);
    let process = Process { version: "0.1.0 (\"x\")".into(), library: "a\\b".into(), threads: 1, max_connections: 1 };
    let text = metrics(&stats, &process);
    assert!(text.contains(r#"lb_tls_info{version="0.1.0 (\"x\")",library="a\\b"} 1"#), "{text}");
}
