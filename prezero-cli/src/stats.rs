//! Figures from repeated measurements: a summary (mean, spread, median,
//! extremes), percentiles, rates, and the rounding of JSON rows.

use std::time::Duration;

/// Summary of repeated measurements of one figure.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub mean: f64,
    /// Sample standard deviation as a percentage of the mean (0 when the mean is not positive).
    pub stdev_pct: f64,
    /// The middle sample; with an even count, the mean of the two middle ones.
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    /// The summary of `samples`; all zero when there are none.
    pub fn of(samples: &[f64]) -> Stats {
        let n = samples.len().max(1) as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let sorted = Sorted::new(samples.to_vec());
        let s = &sorted.0;
        let median = match s.len() {
            0 => 0.0,
            l if l % 2 == 1 => s[l / 2],
            l => (s[l / 2 - 1] + s[l / 2]) / 2.0,
        };
        Stats {
            mean,
            stdev_pct: if mean > 0.0 {
                var.sqrt() / mean * 100.0
            } else {
                0.0
            },
            median,
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
        }
    }
}

/// Samples in ascending order, for percentiles.
pub struct Sorted(Vec<f64>);

impl Sorted {
    pub fn new(mut samples: Vec<f64>) -> Sorted {
        samples.sort_by(f64::total_cmp);
        Sorted(samples)
    }

    /// The `p` percentile (0 < p <= 1) by nearest rank: the smallest sample
    /// with at least a fraction `p` of all samples at or below it; `p = 1`
    /// is the largest. Panics when there are no samples.
    pub fn percentile(&self, p: f64) -> f64 {
        let n = self.0.len();
        self.0[((n as f64 * p).ceil() as usize).clamp(1, n) - 1]
    }
}

/// GB/s (10^9 bytes per second, as perf reports) of `bytes` in `d`.
pub fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-12) / 1e9
}

/// Two decimals, for JSON rows people read.
pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Three decimals, for JSON rows of small figures (microseconds, ratios).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_samples() {
        let s = Stats::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.mean, s.median, s.min, s.max), (2.5, 2.5, 1.0, 4.0));
        assert!((s.stdev_pct - 1.290_994_448_7 / 2.5 * 100.0).abs() < 1e-6);
        let odd = Stats::of(&[5.0, 1.0, 3.0]);
        assert_eq!(odd.median, 3.0);
        let none = Stats::of(&[]);
        assert_eq!((none.mean, none.stdev_pct, none.median), (0.0, 0.0, 0.0));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let s = Sorted::new((1..=100).rev().map(f64::from).collect());
        assert_eq!(s.percentile(0.5), 50.0);
        assert_eq!(s.percentile(0.99), 99.0);
        assert_eq!(s.percentile(1.0), 100.0);
        assert_eq!(s.percentile(0.001), 1.0);
        let one = Sorted::new(vec![7.0]);
        assert_eq!((one.percentile(0.5), one.percentile(1.0)), (7.0, 7.0));
    }

    #[test]
    fn rounding() {
        assert_eq!((round2(1.2346), round3(1.2346)), (1.23, 1.235));
    }
}
