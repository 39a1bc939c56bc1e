//! Measuring: quantiles, medians, units and verdicts.

use std::time::Duration;

/// The p-quantile (0..=1) of sorted values.
pub(super) fn quantile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(super) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[(v.len() - 1) / 2]
}

pub(super) fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

pub(super) fn mb_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

pub(super) fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}
