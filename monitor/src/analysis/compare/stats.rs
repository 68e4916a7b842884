//! Welch's t-test and the special functions behind its p-value (Student's t tail through the
//! regularized incomplete beta function). Pure; matched to reference values in the tests.
use super::*;
/// Welch's t statistic of candidate - baseline and its Welch–Satterthwaite degrees of freedom.
/// Both sides need n >= 2.
pub(super) fn welch_t(base: &Stats, cand: &Stats) -> (f64, f64) {
    let v1 = base.stddev.powi(2) / base.n as f64;
    let v2 = cand.stddev.powi(2) / cand.n as f64;
    let diff = cand.mean - base.mean;
    let se2 = v1 + v2;
    if se2 == 0.0 {
        // No variance on either side: equal means are no evidence of anything, different means
        // are certain. The degrees of freedom are undefined; the pooled ones stand in.
        let t = if diff == 0.0 {
            0.0
        } else {
            diff.signum() * f64::INFINITY
        };
        return (t, (base.n + cand.n - 2) as f64);
    }
    let df = se2.powi(2) / (v1.powi(2) / (base.n - 1) as f64 + v2.powi(2) / (cand.n - 1) as f64);
    (diff / se2.sqrt(), df)
}

/// P(T > t) for Student's t distribution with `df` degrees of freedom (df > 0, need not be an
/// integer): `I_x(df/2, 1/2) / 2` with `x = df / (df + t²)` for t >= 0.
pub fn student_t_sf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 0.0 } else { 1.0 };
    }
    let tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

/// The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1, from its
/// continued fraction (Numerical Recipes, 3rd ed., §6.4), which converges fast for
/// x < (a + 1) / (a + b + 2); the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) covers the rest.
pub fn regularized_incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of I_x(a, b), evaluated by the modified Lentz method.
pub(super) fn beta_continued_fraction(a: f64, b: f64, x: f64) -> f64 {
    const MAX_ITERATIONS: usize = 300;
    const EPSILON: f64 = 1e-15;
    // Stands in for a zero denominator (Lentz).
    const TINY: f64 = 1e-300;
    let not_zero = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / not_zero(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=MAX_ITERATIONS {
        let m = m as f64;
        let m2 = 2.0 * m;
        // Even step.
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / not_zero(1.0 + aa * d);
        c = not_zero(1.0 + aa / c);
        h *= d * c;
        // Odd step.
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / not_zero(1.0 + aa * d);
        c = not_zero(1.0 + aa / c);
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPSILON {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 by the Lanczos approximation (g = 7, 9 terms; ~15 significant digits).
/// `f64::ln_gamma` is not stable yet.
pub(super) fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 - x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}
