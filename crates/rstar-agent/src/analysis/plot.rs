//! Entropy along one trajectory as a self-contained SVG (hand-written, no plotting dependency),
//! and generic line charts ([`line_chart_svg`]) with the same look (the trainer's metric plots).
//!
//! The x axis is the position in `response_ids`; assistant tokens are drawn as a line per turn,
//! tool responses as shaded bands (they have no entropy), tool-call code as a lighter band, the
//! high-entropy threshold as a dashed line, and tokens at or above it as red dots.

use std::fmt::Write as _;

use crate::analysis::entropy::{Group, token_views};
use crate::episode::{Role, Trajectory};
use crate::error::AgentError;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 340.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 44.0;

/// Escapes text for SVG.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round upper bound for the y axis.
fn nice_max(x: f32) -> f64 {
    let x = f64::from(x).max(0.1);
    let step = 10f64.powf(x.log10().floor());
    (x / step).ceil() * step
}

/// The SVG of entropy along `t` (which must have entropies). `threshold` draws the high-entropy
/// line (pass the report's, so the plot agrees with the table); `after_tool` is the window of
/// [`Group::AfterToolResponse`].
pub fn entropy_svg(
    t: &Trajectory,
    threshold: Option<f32>,
    after_tool: usize,
) -> Result<String, AgentError> {
    if !t.has_entropies() {
        return Err(AgentError::Analysis(format!(
            "trajectory `{}` sample {} has no `entropies` to plot",
            t.id, t.sample
        )));
    }
    let views = token_views(t, after_tool)?;
    let n = t.response_ids.len().max(1) as f64;
    let ymax = nice_max(
        views
            .iter()
            .map(|v| v.entropy)
            .chain(threshold)
            .fold(0.0, f32::max),
    );
    let pw = WIDTH - LEFT - RIGHT;
    let ph = HEIGHT - TOP - BOTTOM;
    let x = |pos: f64| LEFT + pw * pos / n;
    let y = |e: f64| TOP + ph * (1.0 - e / ymax);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let reward = t
        .reward
        .map(|r| format!("reward {r}"))
        .unwrap_or_else(|| "unscored".to_string());
    let title = format!(
        "entropy along `{}` sample {} ({reward}, stop {}, {} tool calls)",
        t.id,
        t.sample,
        t.stop.as_str(),
        t.tool_calls.len()
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="18" font-size="14">{}</text>"#,
        xml(&title)
    );

    // Tool responses: shaded bands with a label.
    for turn in t.turns.iter().filter(|t| t.role == Role::Tool) {
        let (x0, x1) = (x(turn.start as f64), x((turn.start + turn.len) as f64));
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.2}" y="{TOP}" width="{:.2}" height="{ph}" fill="#9ecae1" fill-opacity="0.45"><title>tool response</title></rect>"##,
            (x1 - x0).max(1.0)
        );
    }
    // Code: a light band under each run of code tokens.
    let mut i = 0;
    while i < views.len() {
        if views[i].group != Group::Code {
            i += 1;
            continue;
        }
        let start = views[i].position;
        let mut end = start + 1;
        while i + 1 < views.len()
            && views[i + 1].group == Group::Code
            && views[i + 1].position == end
        {
            i += 1;
            end += 1;
        }
        let _ = writeln!(
            s,
            r##"<rect x="{:.2}" y="{TOP}" width="{:.2}" height="{ph}" fill="#fdd49e" fill-opacity="0.35"><title>tool call</title></rect>"##,
            x(start as f64),
            x(end as f64) - x(start as f64)
        );
        i += 1;
    }

    // Axes, ticks and labels.
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT},{TOP} V{} H{}" fill="none" stroke="#333"/>"##,
        TOP + ph,
        LEFT + pw
    );
    for k in 0..=4 {
        let e = ymax * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r##"<line x1="{}" x2="{LEFT}" y1="{y:.2}" y2="{y:.2}" stroke="#333"/><text x="{}" y="{:.2}" text-anchor="end">{e:.2}</text>"##,
            LEFT - 4.0,
            LEFT - 6.0,
            y(e) + 4.0,
            y = y(e)
        );
    }
    for k in 0..=5 {
        let pos = (n * f64::from(k) / 5.0).round();
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.2}" x2="{xx:.2}" y1="{}" y2="{}" stroke="#333"/><text x="{xx:.2}" y="{}" text-anchor="middle">{pos}</text>"##,
            TOP + ph,
            TOP + ph + 4.0,
            TOP + ph + 17.0,
            xx = x(pos)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">response token</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 8.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(14,{}) rotate(-90)" text-anchor="middle">entropy (nats)</text>"#,
        TOP + ph / 2.0
    );

    // One line per assistant turn.
    let mut turn = usize::MAX;
    let mut path = String::new();
    for v in &views {
        let cmd = if v.turn == turn { 'L' } else { 'M' };
        turn = v.turn;
        let _ = write!(
            path,
            "{cmd}{:.2},{:.2} ",
            x(v.position as f64 + 0.5),
            y(f64::from(v.entropy))
        );
    }
    let _ = writeln!(
        s,
        r##"<path d="{}" fill="none" stroke="#3182bd" stroke-width="1.2"/>"##,
        path.trim_end()
    );

    if let Some(thr) = threshold {
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.2}" y2="{yy:.2}" stroke="#de2d26" stroke-dasharray="5,4"/><text x="{}" y="{:.2}" text-anchor="end" fill="#de2d26">threshold {thr:.3}</text>"##,
            LEFT + pw,
            LEFT + pw,
            y(f64::from(thr)) - 4.0,
            yy = y(f64::from(thr))
        );
        for v in views.iter().filter(|v| v.entropy >= thr) {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.2}" cy="{:.2}" r="2.6" fill="#de2d26"><title>{} ({}) {:.3}</title></circle>"##,
                x(v.position as f64 + 0.5),
                y(f64::from(v.entropy)),
                xml(&v.text),
                v.group.as_str(),
                v.entropy
            );
        }
    }

    // Legend.
    let lx = LEFT + pw - 330.0;
    let _ = writeln!(
        s,
        r##"<rect x="{lx}" y="24" width="12" height="10" fill="#9ecae1"/><text x="{}" y="33">tool response</text><rect x="{}" y="24" width="12" height="10" fill="#fdd49e"/><text x="{}" y="33">tool call</text><circle cx="{}" cy="29" r="3" fill="#de2d26"/><text x="{}" y="33">high entropy</text>"##,
        lx + 16.0,
        lx + 116.0,
        lx + 132.0,
        lx + 216.0,
        lx + 224.0
    );
    let _ = writeln!(s, "</svg>");
    Ok(s)
}

/// One line of a [`LineChart`]: `(x, y)` points in x order; a non-finite `y` breaks the line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend label.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker of a [`LineChart`] (e.g. a curriculum stage boundary).
#[derive(Debug, Clone, PartialEq)]
pub struct VLine {
    /// Where, in x units.
    pub x: f64,
    /// Its label.
    pub label: String,
}

/// A line chart of several series over a shared x axis, drawn by [`line_chart_svg`] with the
/// same look as [`entropy_svg`]: one `<path class="series">` per series, one
/// `<line class="vline">` per marker (with a `data-x` attribute in x units).
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// The title.
    pub title: String,
    /// The x axis label.
    pub x_label: String,
    /// The y axis label.
    pub y_label: String,
    /// The x range drawn, `(min, max)`.
    pub x_range: (f64, f64),
    /// The series.
    pub series: Vec<Series>,
    /// Vertical markers.
    pub vlines: Vec<VLine>,
}

/// Series colours, cycled.
const PALETTE: [&str; 6] = [
    "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d62728",
];

impl LineChart {
    /// The pixel x of `x` in the drawn SVG (the plot area spans `LEFT..WIDTH - RIGHT`, i.e.
    /// 56..984 of a 1000-pixel-wide image).
    pub fn x_px(&self, x: f64) -> f64 {
        let (lo, hi) = self.x_range;
        let span = if hi > lo { hi - lo } else { 1.0 };
        LEFT + (WIDTH - LEFT - RIGHT) * (x - lo) / span
    }

    /// The y range drawn: from `min(0, smallest y)` to a round bound above the largest.
    fn y_range(&self) -> (f64, f64) {
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|y| y.is_finite());
        let (lo, hi) = ys.fold((0.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let hi = nice_max(hi as f32);
        let lo = if lo < 0.0 { -nice_max(-lo as f32) } else { 0.0 };
        (lo, hi)
    }
}

/// The SVG of a [`LineChart`].
pub fn line_chart_svg(chart: &LineChart) -> String {
    let (ylo, yhi) = chart.y_range();
    let pw = WIDTH - LEFT - RIGHT;
    let ph = HEIGHT - TOP - BOTTOM;
    let y = |v: f64| TOP + ph * (1.0 - (v - ylo) / (yhi - ylo));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="18" font-size="14">{}</text>"#,
        xml(&chart.title)
    );
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT},{TOP} V{} H{}" fill="none" stroke="#333"/>"##,
        TOP + ph,
        LEFT + pw
    );
    for k in 0..=4 {
        let v = ylo + (yhi - ylo) * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r##"<line x1="{}" x2="{LEFT}" y1="{yy:.2}" y2="{yy:.2}" stroke="#333"/><text x="{}" y="{:.2}" text-anchor="end">{}</text>"##,
            LEFT - 4.0,
            LEFT - 6.0,
            y(v) + 4.0,
            tick(v),
            yy = y(v)
        );
    }
    let (xlo, xhi) = chart.x_range;
    for k in 0..=5 {
        let v = xlo + (xhi - xlo) * f64::from(k) / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.2}" x2="{xx:.2}" y1="{}" y2="{}" stroke="#333"/><text x="{xx:.2}" y="{}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 4.0,
            TOP + ph + 17.0,
            tick(v),
            xx = chart.x_px(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 8.0,
        xml(&chart.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        xml(&chart.y_label)
    );
    for v in &chart.vlines {
        let xx = chart.x_px(v.x);
        let _ = writeln!(
            s,
            r##"<line class="vline" data-x="{}" x1="{xx:.2}" x2="{xx:.2}" y1="{TOP}" y2="{}" stroke="#888" stroke-dasharray="4,3"/><text x="{:.2}" y="{}" fill="#555">{}</text>"##,
            v.x,
            TOP + ph,
            xx + 3.0,
            TOP + 12.0,
            xml(&v.label)
        );
    }
    for (i, series) in chart.series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let mut d = String::new();
        let mut pen_down = false;
        for &(px, py) in &series.points {
            if !py.is_finite() {
                pen_down = false;
                continue;
            }
            let cmd = if pen_down { 'L' } else { 'M' };
            pen_down = true;
            let _ = write!(d, "{cmd}{:.2},{:.2} ", chart.x_px(px), y(py));
        }
        let _ = writeln!(
            s,
            r##"<path class="series" data-name="{}" d="{}" fill="none" stroke="{colour}" stroke-width="1.5"/>"##,
            xml(&series.name),
            d.trim_end()
        );
        let ly = TOP + 4.0 + 14.0 * i as f64;
        let lx = LEFT + pw - 200.0;
        let _ = writeln!(
            s,
            r##"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"##,
            lx + 16.0,
            lx + 20.0,
            ly + 4.0,
            xml(&series.name)
        );
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// A short tick label.
fn tick(v: f64) -> String {
    if v == v.round() && v.abs() < 1e6 {
        format!("{v:.0}")
    } else if v.abs() >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.1e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_has_a_path_per_series_and_marks_by_hand() {
        let chart = LineChart {
            title: "t <1>".into(),
            x_label: "step".into(),
            y_label: "y".into(),
            x_range: (0.0, 10.0),
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(0.0, 0.0), (10.0, 1.0)],
                },
                Series {
                    name: "b".into(),
                    points: vec![(0.0, 0.5), (5.0, f64::NAN), (10.0, 0.5)],
                },
            ],
            vlines: vec![VLine {
                x: 5.0,
                label: "stage".into(),
            }],
        };
        // 56 + 928 · 5 / 10 = 520.
        assert_eq!(chart.x_px(5.0), 520.0);
        let svg = line_chart_svg(&chart);
        assert_eq!(svg.matches(r#"class="series""#).count(), 2);
        assert!(svg.contains(r#"data-x="5" x1="520.00""#), "{svg}");
        // y from 0 to 1 over 256 pixels from 40: y = 1 is at 40, y = 0 at 296.
        assert!(svg.contains(r#"d="M56.00,296.00 L984.00,40.00""#), "{svg}");
        // The NaN breaks series b into two moves.
        assert!(svg.contains(r#"d="M56.00,168.00 M984.00,168.00""#), "{svg}");
        assert!(svg.contains("t &lt;1&gt;"));
    }

    #[test]
    fn nice_max_rounds_up() {
        assert_eq!(nice_max(2.3), 3.0);
        assert_eq!(nice_max(0.42), 0.5);
        assert_eq!(nice_max(0.0), 0.1);
    }

    #[test]
    fn a_trajectory_without_entropies_cannot_be_plotted() {
        use crate::episode::{ByteTokenizer, Episode, Limits};
        use crate::template::Template;
        let tok = ByteTokenizer;
        let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "q");
        ep.push_assistant_text("<answer>1</answer>").unwrap();
        let t = ep.finish().unwrap();
        let err = entropy_svg(&t, None, 20).unwrap_err().to_string();
        assert!(err.contains("has no `entropies` to plot"), "{err}");
    }

    #[test]
    fn xml_escapes_markup() {
        assert_eq!(xml("<c>&\"</c>"), "&lt;c&gt;&amp;&quot;&lt;/c&gt;");
    }
}
