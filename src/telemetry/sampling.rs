//! Which requests are traced, decided once at the head of each request, before any span
//! of it exists: an unsampled request then costs what it costs with tracing off (its
//! span is the log's alone, and the exporter's layer never sees it), instead of the
//! exporter building and dropping every span of it. Parent-based by default: a caller's
//! `traceparent` decides for its request; of the traces the gateway starts,
//! `tracing.sample_ratio` are sampled. Unset, the standard `OTEL_TRACES_SAMPLER` (and
//! `OTEL_TRACES_SAMPLER_ARG`) are read, as the SDK would read them.

use std::sync::OnceLock;

use super::otlp::{env, TracingError};
use crate::config::TracingConfig;

/// The sampler: of root traces, and whether a caller's decision is followed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// The share of the traces the gateway starts that are sampled (0 to 1).
    pub ratio: f64,
    /// A caller's `traceparent` decides (its sampled flag) instead of `ratio`.
    pub parent_based: bool,
}

static SAMPLING: OnceLock<Sampling> = OnceLock::new();

impl Sampling {
    /// The section's `sample_ratio` (parent-based), else the `OTEL_TRACES_SAMPLER`
    /// variables, else every trace, parent-based.
    pub fn read(config: &TracingConfig) -> Result<Self, TracingError> {
        if let Some(ratio) = config.sample_ratio {
            return Ok(Self::parent_based(ratio));
        }
        let Some(sampler) = env("OTEL_TRACES_SAMPLER") else {
            return Ok(Self::parent_based(1.0));
        };
        let arg = env("OTEL_TRACES_SAMPLER_ARG");
        let ratio = match arg.as_deref().map(str::trim).map(str::parse::<f64>) {
            None => Ok(1.0),
            Some(Ok(r)) if (0.0..=1.0).contains(&r) => Ok(r),
            Some(_) => Err(TracingError::Sampler {
                var: "OTEL_TRACES_SAMPLER_ARG",
                value: arg.clone().unwrap_or_default(),
            }),
        };
        let (ratio, parent_based) = match sampler.trim() {
            "always_on" => (1.0, false),
            "always_off" => (0.0, false),
            "traceidratio" => (ratio?, false),
            "parentbased_always_on" => (1.0, true),
            "parentbased_always_off" => (0.0, true),
            "parentbased_traceidratio" => (ratio?, true),
            _ => {
                let var = "OTEL_TRACES_SAMPLER";
                return Err(TracingError::Sampler {
                    var,
                    value: sampler,
                });
            }
        };
        Ok(Self {
            ratio,
            parent_based,
        })
    }

    fn parent_based(ratio: f64) -> Self {
        Self {
            ratio,
            parent_based: true,
        }
    }

    /// Whether a request is traced: `caller` is its valid `traceparent`'s sampled flag.
    pub fn decide(&self, caller: Option<bool>) -> bool {
        match caller {
            Some(sampled) if self.parent_based => sampled,
            _ if self.ratio >= 1.0 => true,
            _ if self.ratio <= 0.0 => false,
            _ => {
                let draw = uuid::Uuid::new_v4().as_u64_pair().0 >> 11;
                (draw as f64) < self.ratio * (1u64 << 53) as f64
            }
        }
    }

    /// Set once, when the exporter starts.
    pub(super) fn install(self) {
        let _ = SAMPLING.set(self);
    }

    /// The installed sampler (every request, before one is installed).
    pub fn get() -> Sampling {
        SAMPLING.get().copied().unwrap_or(Self::parent_based(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_flag_decides_and_the_ratio_decides_the_rest() {
        let half = Sampling::parent_based(0.5);
        assert!(half.decide(Some(true)));
        assert!(!half.decide(Some(false)));
        let sampled = (0..4000).filter(|_| half.decide(None)).count();
        assert!((1700..2300).contains(&sampled), "{sampled} of 4000 at 0.5");
        let none = Sampling::parent_based(0.0);
        assert!((0..1000).all(|_| !none.decide(None)));
        let ratio_only = Sampling {
            ratio: 0.0,
            parent_based: false,
        };
        assert!(!ratio_only.decide(Some(true)), "not parent-based");
    }
}
