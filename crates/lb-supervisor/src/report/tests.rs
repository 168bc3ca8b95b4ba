use super::*;

#[test]
fn info_lists_haproxys_fields_in_its_order_and_leaves_out_empty_ones() {
    let mut info = Info::new();
    info.set("Name", "lb-proxy").set("Version", "0.1.0").set("Pid", 42).set("node", "edge1");
    let plain = info.render(Format::Plain);
    let names: Vec<&str> = plain.lines().map(|l| l.split(": ").next().unwrap_or("")).collect();
    assert_eq!(&names[..4], ["Name", "Version", "Nbthread", "Nbproc"], "Release_date unset: left out");
    assert!(plain.contains("\nPid: 42\n") && plain.contains("\nnode: edge1\n"));
    assert!(plain.contains("\nMaxpipes: 0\n"), "neutral numbers are printed: {plain}");
    assert!(!plain.contains("description"), "empty text is left out, as HAProxy does");
    assert!(plain.ends_with("Tainted: 0\n"));
    // hatop's required fields are all there once a daemon fills in its process.
    let full = Info::process("lb-proxy", "0.1.0", 1, Instant::now(), SystemTime::now()).render(Format::Plain);
    for field in [
        "Name",
        "Version",
        "Release_date",
        "Nbproc",
        "Process_num",
        "Pid",
        "Uptime",
        "Maxconn",
        "CurrConns",
        "Maxpipes",
        "PipesUsed",
        "Tasks",
        "Run_queue",
        "node",
    ] {
        assert!(full.lines().any(|l| l.starts_with(&format!("{field}: "))), "{field} missing:\n{full}");
    }
}

#[test]
fn typed_and_json_info_carry_positions_tags_and_types() {
    let mut info = Info::new();
    info.set("Name", "lb-proxy").set("Uptime_sec", 7).set("Tasks", 3);
    let typed = info.render(Format::Typed);
    assert!(typed.starts_with("0.Name.1:POS:str:lb-proxy\n"), "{typed}");
    assert!(typed.contains("\n8.Uptime_sec.1:MDP:u32:7\n"), "{typed}");
    assert!(typed.contains("\n47.Tasks.1:MGP:u32:3\n"), "positions skip HAProxy's zlib fields: {typed}");
    let json: Value = serde_json::from_str(&info.render(Format::Json)).expect("json");
    let first = &json[0];
    assert_eq!(first["field"], json!({"pos": 0, "name": "Name"}));
    assert_eq!(first["tags"], json!({"origin": "Product", "nature": "Output", "scope": "Service"}));
    assert_eq!(first["value"], json!({"type": "str", "value": "lb-proxy"}));
    let uptime = json.as_array().expect("array").iter().find(|f| f["field"]["name"] == "Uptime_sec").expect("uptime");
    assert_eq!(uptime["value"], json!({"type": "u32", "value": 7}));
}

#[test]
fn stat_typed_and_json_name_each_object() {
    let columns = |_: ObjType, pos: usize| match pos {
        0 => StatField { name: "pxname", tags: "KNS", kind: Kind::Str },
        1 => StatField { name: "svname", tags: "KNS", kind: Kind::Str },
        _ => StatField { name: "lastsess", tags: "MAP", kind: Kind::S32 },
    };
    let fe = ["web".to_owned(), "FRONTEND".to_owned(), String::new()];
    let srv = ["api".to_owned(), "a1".to_owned(), "-1".to_owned()];
    let rows = [
        StatObject { obj: ObjType::Frontend, iid: 1, sid: 0, cells: &fe },
        StatObject { obj: ObjType::Server, iid: 2, sid: 3, cells: &srv },
    ];
    assert_eq!(
        stat_typed(&columns, &rows),
        "F.1.0.0.pxname.1:KNS:str:web\nF.1.0.1.svname.1:KNS:str:FRONTEND\n\n\
         S.2.3.0.pxname.1:KNS:str:api\nS.2.3.1.svname.1:KNS:str:a1\nS.2.3.2.lastsess.1:MAP:s32:-1\n\n"
    );
    let json: Value = serde_json::from_str(&stat_json(&columns, &rows)).expect("json");
    assert_eq!(json.as_array().map(Vec::len), Some(2));
    assert_eq!(json[1][2]["objType"], "Server");
    assert_eq!(json[1][2]["id"], 3);
    assert_eq!(json[1][2]["value"], json!({"type": "s32", "value": -1}));
    assert_eq!(json[1][2]["tags"]["nature"], "Age");
}

#[test]
fn the_schema_is_json_and_names_the_three_shapes() {
    let schema: Value = serde_json::from_str(&schema_json()).expect("json");
    let titles: Vec<&str> =
        schema["oneOf"].as_array().expect("oneOf").iter().filter_map(|s| s["title"].as_str()).collect();
    assert_eq!(titles, ["Info", "Stat", "Error"]);
}

#[test]
fn formats_are_taken_from_anywhere_among_the_words() {
    assert_eq!(Format::take(&["typed"]), Ok((Format::Typed, vec![])));
    assert_eq!(Format::take(&["api", "2", "-1", "json"]), Ok((Format::Json, vec!["api", "2", "-1"])));
    assert_eq!(Format::take(&[]), Ok((Format::Plain, vec![])));
}

#[test]
fn uptime_reads_like_haproxys() {
    assert_eq!(uptime_text(0), "0d 0h00m00s");
    assert_eq!(uptime_text(90_061), "1d 1h01m01s");
}
