//! The latency histogram: 100 µs buckets up to 10 s, the last one open.

const BUCKET_US: u64 = 100;
const BUCKETS: usize = 100_001;

pub(super) struct Histogram {
    counts: Vec<u64>,
    pub(super) total: u64,
    pub(super) max_us: u64,
}

impl Histogram {
    pub(super) fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
            max_us: 0,
        }
    }

    pub(super) fn add_all(&mut self, samples: &[u64]) {
        for &us in samples {
            self.counts[((us / BUCKET_US) as usize).min(BUCKETS - 1)] += 1;
            self.max_us = self.max_us.max(us);
        }
        self.total += samples.len() as u64;
    }

    /// The `p`th percentile, ms (the upper edge of its bucket).
    pub(super) fn percentile_ms(&self, p: f64) -> f64 {
        if self.total == 0 {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return ((i as u64 + 1) * BUCKET_US) as f64 / 1000.0;
            }
        }
        self.max_us as f64 / 1000.0
    }
}
