//! The table the run prints: its rows, the verdicts, and the figures
//! formatted for it.

pub(super) fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

pub(super) struct Row {
    pub(super) what: String,
    pub(super) value: String,
    pub(super) goal: String,
    pub(super) limit: String,
}

/// PASS, MISS, or PASS at a scale below the goal's (which proves less).
pub(super) fn verdict(ok: bool, at_goal_scale: bool) -> &'static str {
    match (ok, at_goal_scale) {
        (false, _) => "MISS",
        (true, true) => "PASS",
        (true, false) => "PASS below the goal's scale",
    }
}

/// "X statements, Y transactions per item; by kind: ..." from the
/// in-process hub's `done` figures and its "stmt" lines.
pub(super) fn database_per_item(num: &dyn Fn(&str) -> f64, kinds: &[String]) -> String {
    let items = num("sent").max(1.0);
    let mut out = format!("{:.2} statements", num("statements") / items);
    let xacts = num("xacts");
    if xacts.is_finite() {
        let background = num("xacts_background_per_s") * num("xacts_window_s");
        out.push_str(&format!(
            ", {:.2} server transactions ({xacts:.0} in {:.1} s, {background:.0} of them background)",
            (xacts - background).max(0.0) / items,
            num("xacts_window_s"),
        ));
    }
    let server_cpu = num("server_cpu_s");
    if server_cpu.is_finite() {
        out.push_str(&format!(
            ", {:.3} ms of PostgreSQL CPU ({server_cpu:.1} s in the database's backends)",
            server_cpu * 1000.0 / items
        ));
    }
    out.push_str(&format!(
        " per item; link writes (put, ack, report) in {:.0} group commits, {:.1} writes each",
        num("groups"),
        num("grouped_writes") / num("groups").max(1.0),
    ));
    // PostgreSQL: a group is one statement, timed by the client.
    if num("group_ms") > 0.0 {
        out.push_str(&format!(
            ", the group statement {:.1} ms each on the client's clock",
            num("group_ms") / num("groups").max(1.0)
        ));
    }
    out.push(';');
    out.push_str(" by statement (count, client s):");
    for kind in kinds {
        let mut f = kind.splitn(3, '\t');
        let (n, secs, label) = (f.next(), f.next(), f.next());
        if let (Some(n), Some(secs), Some(label)) = (n, secs, label) {
            let per_item = n.parse::<f64>().unwrap_or(0.0) / items;
            out.push_str(&format!("\n      {per_item:.2}/item {n} {secs} s  {label}"));
        }
    }
    out
}
