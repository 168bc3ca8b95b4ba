//! The formats, against HAProxy 2.6's own text.

use super::{escape, info::SERVERS_STATE_HEADER, COLUMNS};

/// `show stat`'s first line as Debian's HAProxy 2.6 prints it (also compared with a running
/// haproxy by tests/runtime_stats.rs).
const HAPROXY_26_HEADER: &str = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie,mode,algo,conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,cache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,safe_conn_cur,used_conn_cur,need_conn_est,uweight,agg_server_status,agg_server_check_status,agg_check_status,-,ssl_sess,ssl_reused_sess,ssl_failed_handshake,h2_headers_rcvd,h2_data_rcvd,h2_settings_rcvd,h2_rst_stream_rcvd,h2_goaway_rcvd,h2_detected_conn_protocol_errors,h2_detected_strm_protocol_errors,h2_rst_stream_resp,h2_goaway_resp,h2_open_connections,h2_backend_open_streams,h2_total_connections,h2_backend_total_streams,h1_open_connections,h1_open_streams,h1_total_connections,h1_total_streams,h1_bytes_in,h1_bytes_out,h1_spliced_bytes_in,h1_spliced_bytes_out,";

#[test]
fn stat_header_is_haproxys() {
    let names: Vec<&str> = COLUMNS.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(format!("# {},", names.join(",")), HAPROXY_26_HEADER);
}

#[test]
fn servers_state_header_is_haproxys() {
    assert_eq!(
        SERVERS_STATE_HEADER,
        "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight \
         srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state \
         srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port \
         srv_check_addr srv_agent_addr srv_agent_port\n"
    );
}

#[test]
fn csv_cells_are_quoted_only_when_ambiguous() {
    assert_eq!(escape("L7OK"), "L7OK");
    assert_eq!(escape("a,b"), "\"a,b\"");
    assert_eq!(escape("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(escape("two\nlines"), "\"two\nlines\"");
}

#[test]
fn show_stat_selections() {
    use super::Filter;
    assert_eq!(Filter::parse(&["-1", "-1", "-1"]), Ok(Filter::ALL));
    let only_servers = Filter::parse(&["api", "4", "2"]).expect("valid");
    assert!(only_servers.proxy(3, "api") && !only_servers.proxy(2, "web"));
    let by_id = Filter::parse(&["3", "-1", "-1"]).expect("valid");
    assert!(by_id.proxy(3, "api") && !by_id.proxy(2, "web"));
    assert!(Filter::parse(&["-1", "9", "-1"]).is_err());
    assert!(Filter::parse(&["-1", "-1"]).is_err());
    assert!(Filter::parse(&["-1", "-1", "0"]).is_err());
}
