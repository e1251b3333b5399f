//! Simulation results: per-policy numbers, a text table and an SVG plot.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::SimConfig;
use crate::policy::{DispatchPolicy, KvRetention};

/// Picks one timeline of a report.
type Series = fn(&PolicyReport) -> &[f32];

/// Formats one cell of the table.
type Cell<'a> = Box<dyn Fn(&PolicyReport) -> String + 'a>;

/// Statistics of a simulated workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSummary {
    /// Rollouts in the batch.
    pub rollouts: usize,
    /// Model tokens to generate.
    pub generated_tokens: u64,
    /// Mean response length (model and tool tokens).
    pub response_tokens_mean: f64,
    /// Median response length.
    pub response_tokens_p50: u64,
    /// 99th-percentile response length.
    pub response_tokens_p99: u64,
    /// Longest response.
    pub response_tokens_max: u64,
    /// Fraction of rollouts that hit the budget.
    pub truncated_fraction: f64,
    /// Mean tool calls per rollout.
    pub tool_calls_mean: f64,
}

/// What one policy did on one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReport {
    /// The dispatch policy.
    pub policy: DispatchPolicy,
    /// The KV retention during tool calls.
    pub retention: KvRetention,
    /// Rollouts completed (all of them).
    pub rollouts: usize,
    /// Seconds from the start until the last rollout ends.
    pub makespan_s: f64,
    /// Fraction of engine-seconds (engines × makespan) in which an engine decoded nothing.
    pub gpu_idle_fraction: f64,
    /// Model tokens generated (equal to the workload's: conservation).
    pub generated_tokens: u64,
    /// Generated tokens per second of makespan, over all engines.
    pub throughput_tokens_per_s: f64,
    /// Mean sequences per decode step.
    pub mean_batch: f64,
    /// Tokens prefilled (prompts, tool outputs, and recomputation after evictions or releases).
    pub prefilled_tokens: u64,
    /// Cached tokens thrown away by evictions, to be prefilled again.
    pub recomputed_tokens: u64,
    /// Preemptions: a sequence lost its KV cache because the engine ran out.
    pub evictions: u64,
    /// Highest KV use of any engine, as a fraction of its capacity (never above 1).
    pub peak_kv_fraction: f64,
    /// Highest reserved fraction of any engine's capacity (kv-aware only; never above 1).
    pub peak_reserved_fraction: f64,
    /// Tool calls run.
    pub tool_calls: u64,
    /// Most tool calls in flight at once.
    pub peak_tool_concurrency: usize,
    /// Time-averaged tool calls in flight.
    pub mean_tool_concurrency: f64,
    /// Width of one timeline point, seconds.
    pub timeline_step_s: f64,
    /// Fraction of engines decoding, per timeline point.
    pub timeline: Vec<f32>,
    /// Mean batch occupancy (running sequences over `max_batch`, idle engines counting as
    /// zero) per timeline point: what the idle fraction does not show.
    pub occupancy: Vec<f32>,
}

/// All three policies on one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// The config that produced it.
    pub config: SimConfig,
    /// The workload's statistics.
    pub workload: WorkloadSummary,
    /// One report per policy, in [`DispatchPolicy::ALL`] order.
    pub policies: Vec<PolicyReport>,
}

impl SimReport {
    /// The report for `policy`, if it was simulated.
    pub fn get(&self, policy: DispatchPolicy) -> Option<&PolicyReport> {
        self.policies.iter().find(|p| p.policy == policy)
    }

    /// Relative cut of GPU idle time against `static`: `1 - idle(policy) / idle(static)`,
    /// where idle time is the idle fraction times engines times makespan (engine-seconds).
    pub fn idle_cut_vs_static(&self, policy: DispatchPolicy) -> Option<f64> {
        let base = self.get(DispatchPolicy::Static)?;
        let p = self.get(policy)?;
        let idle = |r: &PolicyReport| r.gpu_idle_fraction * r.makespan_s;
        let b = idle(base);
        (b > 0.0).then(|| 1.0 - idle(p) / b)
    }

    /// The policies side by side as a plain-text table.
    pub fn table(&self) -> String {
        let c = &self.config;
        let w = &self.workload;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "preset {} (seed {}): {} GPUs as {} engines x {}K KV tokens, {} rollouts ({} prompts x {}), \
             budget {}, retention {}",
            c.name,
            c.seed,
            c.engines * c.gpus_per_engine,
            c.engines,
            c.engine.kv_capacity_tokens / 1000,
            w.rollouts,
            c.workload.prompts,
            c.workload.rollouts_per_prompt,
            c.workload.max_response_tokens,
            c.retention.name(),
        );
        let _ = writeln!(
            out,
            "responses: mean {:.0}, p50 {}, p99 {}, max {} tokens; {:.1}% truncated; {:.2} tool calls per rollout",
            w.response_tokens_mean,
            w.response_tokens_p50,
            w.response_tokens_p99,
            w.response_tokens_max,
            100.0 * w.truncated_fraction,
            w.tool_calls_mean,
        );
        let rows: [(&str, Cell<'_>); 11] = [
            ("makespan (s)", Box::new(|r| format!("{:.1}", r.makespan_s))),
            (
                "GPU idle",
                Box::new(|r| format!("{:.1}%", 100.0 * r.gpu_idle_fraction)),
            ),
            (
                "idle cut vs static",
                Box::new(|r| {
                    self.idle_cut_vs_static(r.policy)
                        .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
                }),
            ),
            (
                "tokens/s",
                Box::new(|r| format!("{:.0}", r.throughput_tokens_per_s)),
            ),
            ("mean batch", Box::new(|r| format!("{:.1}", r.mean_batch))),
            (
                "peak KV use",
                Box::new(|r| format!("{:.1}%", 100.0 * r.peak_kv_fraction)),
            ),
            ("evictions", Box::new(|r| r.evictions.to_string())),
            (
                "recomputed tokens",
                Box::new(|r| r.recomputed_tokens.to_string()),
            ),
            ("tool calls", Box::new(|r| r.tool_calls.to_string())),
            (
                "peak tool concurrency",
                Box::new(|r| r.peak_tool_concurrency.to_string()),
            ),
            (
                "mean tool concurrency",
                Box::new(|r| format!("{:.1}", r.mean_tool_concurrency)),
            ),
        ];
        let _ = write!(out, "{:<24}", "");
        for p in &self.policies {
            let _ = write!(out, "{:>16}", p.policy.name());
        }
        out.push('\n');
        for (label, f) in &rows {
            let _ = write!(out, "{label:<24}");
            for p in &self.policies {
                let _ = write!(out, "{:>16}", f(p));
            }
            out.push('\n');
        }
        out
    }

    /// Engine utilisation over time, one line per policy, as a standalone SVG document: the
    /// fraction of engines decoding (top) and the mean batch occupancy (bottom).
    pub fn utilisation_svg(&self) -> String {
        let (w, h) = (900.0, 700.0);
        let (left, right, ph) = (70.0, 170.0, 250.0);
        let pw = w - left - right;
        let t_max = self
            .policies
            .iter()
            .map(|p| p.makespan_s)
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let x = |t: f64| left + pw * t / t_max;
        let colours = ["#d62728", "#ff7f0e", "#1f77b4"];
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">Engine utilisation over time: {} ({} engines of {} GPUs, {} rollouts)</text>"#,
            left + pw / 2.0,
            xml_escape(&self.config.name),
            self.config.engines,
            self.config.gpus_per_engine,
            self.workload.rollouts
        );
        let panels: [(f64, &str, Series); 2] = [
            (45.0, "engines decoding", |p| &p.timeline),
            (385.0, "batch occupancy", |p| &p.occupancy),
        ];
        for (top, label, series) in panels {
            let y = |u: f64| top + ph * (1.0 - u);
            for k in 0..=5 {
                let u = k as f64 / 5.0;
                let _ = writeln!(
                    s,
                    r##"<line x1="{left}" y1="{yy:.1}" x2="{x2}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{pct}%</text>"##,
                    yy = y(u),
                    x2 = left + pw,
                    tx = left - 6.0,
                    ty = y(u) + 4.0,
                    pct = (u * 100.0) as u32
                );
            }
            let tick = nice_step(t_max / 6.0);
            let mut t = 0.0;
            while t <= t_max + 1e-9 {
                let _ = writeln!(
                    s,
                    r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{yb}" stroke="#eee"/><text x="{xx:.1}" y="{ty}" text-anchor="middle">{t}</text>"##,
                    xx = x(t),
                    yb = top + ph,
                    ty = top + ph + 16.0,
                );
                t += tick;
            }
            let _ = writeln!(
                s,
                r#"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">time (s)</text>"#,
                left + pw / 2.0,
                top + ph + 34.0
            );
            let _ = writeln!(
                s,
                r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{label}</text>"#,
                top + ph / 2.0
            );
            for (k, p) in self.policies.iter().enumerate() {
                let colour = colours[k % colours.len()];
                let mut points = String::new();
                for (i, &u) in series(p).iter().enumerate() {
                    let t0 = i as f64 * p.timeline_step_s;
                    let t1 = t0 + p.timeline_step_s;
                    let _ = write!(
                        points,
                        "{:.1},{:.1} {:.1},{:.1} ",
                        x(t0),
                        y(u as f64),
                        x(t1),
                        y(u as f64)
                    );
                }
                // Drop to zero at the makespan: every engine is done.
                let _ = write!(points, "{:.1},{:.1}", x(p.makespan_s), y(0.0));
                let _ = writeln!(
                    s,
                    r#"<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>"#
                );
            }
        }
        for (k, p) in self.policies.iter().enumerate() {
            let colour = colours[k % colours.len()];
            let ly = 65.0 + 50.0 * k as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{lx2}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{tx}" y="{ty}">{name}</text><text x="{tx}" y="{ty2}" font-size="10">{mk:.0} s, idle {idle:.0}%</text><text x="{tx}" y="{ty3}" font-size="10">mean batch {batch:.0}</text>"#,
                lx = left + pw + 12.0,
                lx2 = left + pw + 36.0,
                tx = left + pw + 42.0,
                ty = ly + 4.0,
                ty2 = ly + 17.0,
                ty3 = ly + 30.0,
                name = p.policy.name(),
                mk = p.makespan_s,
                idle = 100.0 * p.gpu_idle_fraction,
                batch = p.mean_batch,
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&v| v >= raw)
        .unwrap_or(10.0 * p)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(13.0), 20.0);
        assert_eq!(nice_step(45.0), 50.0);
        assert_eq!(nice_step(51.0), 100.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn escapes() {
        assert_eq!(xml_escape(r#"a<b>&"c""#), "a&lt;b&gt;&amp;&quot;c&quot;");
    }
}
