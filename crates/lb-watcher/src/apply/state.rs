//! `show servers state` in HAProxy 2.6's format: a version line (`1`), a `# ` header naming
//! the columns, then one line per server. Columns are found by name, so added columns do not
//! matter.

use std::net::{IpAddr, SocketAddr};

/// One server as the running lb-proxy has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningServer {
    pub backend: String,
    pub name: String,
    pub address: SocketAddr,
    pub weight: u32,
    /// `srv_admin_state` bit 0x01.
    pub maint: bool,
    /// `srv_admin_state` bit 0x08.
    pub drain: bool,
}

pub fn parse_servers_state(output: &str) -> Result<Vec<RunningServer>, String> {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    match lines.next().map(str::trim) {
        Some("1") => {}
        other => return Err(format!("expected version line `1`, got {other:?}")),
    }
    let header = lines.next().and_then(|l| l.strip_prefix('#')).ok_or("no `# be_id be_name …` header")?;
    let columns: Vec<&str> = header.split_whitespace().collect();
    let col = |name: &str| columns.iter().position(|c| *c == name).ok_or(format!("no column `{name}`"));
    let (be, name, addr, admin, weight, port) = (
        col("be_name")?,
        col("srv_name")?,
        col("srv_addr")?,
        col("srv_admin_state")?,
        col("srv_uweight")?,
        col("srv_port")?,
    );
    let mut servers = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let get = |i: usize| fields.get(i).copied().ok_or(format!("short line `{line}`"));
        let ip: IpAddr = get(addr)?.parse().map_err(|_| format!("bad srv_addr in `{line}`"))?;
        let port: u16 = get(port)?.parse().map_err(|_| format!("bad srv_port in `{line}`"))?;
        let admin: u32 = get(admin)?.parse().map_err(|_| format!("bad srv_admin_state in `{line}`"))?;
        servers.push(RunningServer {
            backend: get(be)?.to_owned(),
            name: get(name)?.to_owned(),
            address: SocketAddr::new(ip, port),
            weight: get(weight)?.parse().map_err(|_| format!("bad srv_uweight in `{line}`"))?,
            maint: admin & 0x01 != 0,
            drain: admin & 0x08 != 0,
        });
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_26_format() {
        let text = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight \
                    srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state \
                    srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord\n\
                    3 api 1 web1 10.0.0.5 2 0 100 100 12 6 3 4 6 0 0 0 - 81 -\n\
                    3 api 2 web2 10.0.0.6 2 8 50 50 12 6 3 4 6 0 0 0 - 81 -\n";
        let servers = parse_servers_state(text).unwrap_or_default();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].address, SocketAddr::from(([10, 0, 0, 5], 81)));
        assert!(!servers[0].drain && !servers[0].maint);
        assert!(servers[1].drain && servers[1].weight == 50);
        assert!(parse_servers_state("No such backend.\n").is_err());
        assert_eq!(
            parse_servers_state("1\n# be_id be_name srv_name srv_addr srv_admin_state srv_uweight srv_port\n"),
            Ok(vec![])
        );
    }
}
