//! Entropy along one trajectory as a self-contained SVG (hand-written, no plotting dependency),
//! and generic line charts ([`line_chart_svg`]) with the same look (the trainer's metric plots).
//! Every axis has its ticks at round values: the multiples of 1, 2 or 5 times a power of ten
//! ([`ticks`]), integers over steps and token positions.
//!
//! Why not `plotters` (issue #69 asked): these two chart kinds are about 560 lines here, tests
//! apart, with no dependency; `plotters` with only its SVG backend is three crates of about
//! 17,000 lines of Rust, and its SVG writes no classes or `data-` attributes, which the report's
//! page and its browser test read (a series' name, a stage line's step), nor shaded bands with
//! titles. docs/analysis.md has the comparison.
//!
//! The x axis is the position in `response_ids`; assistant tokens are drawn as a line per turn,
//! tool responses as shaded bands (they have no entropy), tool-call code as a lighter band, the
//! high-entropy threshold as a dashed line, and tokens at or above it as red dots.

use std::fmt::Write as _;

use crate::Error;
use crate::entropy::{Group, token_views};
use rstar_episode::episode::{Role, Trajectory};

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
) -> Result<String, Error> {
    if !t.has_entropies() {
        return Err(Error::Entropy(format!(
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
    let (yticks, ystep) = ticks(0.0, ymax, 6, false);
    for e in yticks {
        let _ = writeln!(
            s,
            r##"<line x1="{}" x2="{LEFT}" y1="{y:.2}" y2="{y:.2}" stroke="#333"/><text class="ytick" x="{}" y="{:.2}" text-anchor="end">{}</text>"##,
            LEFT - 4.0,
            LEFT - 6.0,
            y(e) + 4.0,
            tick_label(e, ystep),
            y = y(e)
        );
    }
    let (xticks, xstep) = ticks(0.0, n, 10, true);
    for pos in xticks {
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.2}" x2="{xx:.2}" y1="{}" y2="{}" stroke="#333"/><text class="xtick" x="{xx:.2}" y="{}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 4.0,
            TOP + ph + 17.0,
            tick_label(pos, xstep),
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

/// One line of a [`LineChart`]: `(x, y)` points in x order; a non-finite `y` breaks the line
/// (in a stacked chart it counts as 0).
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
/// `<line class="vline">` per marker (with a `data-x` attribute in x units) and its
/// `<text class="vlabel">`, tick labels as `<text class="xtick">` / `<text class="ytick">`,
/// and the legend as `<g class="legend">` in rows between the title and the plot area, so
/// that nothing drawn inside the plot area can cover it.
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
    /// Whether x counts something (steps): ticks only at integers.
    pub integer_x: bool,
    /// Whether the series are the parts of a whole: each is drawn on top of the ones before
    /// it, its band filled, so that the top edge is their sum. Stacked series share their x
    /// values, point by point.
    pub stacked: bool,
}

/// Series colours, cycled.
const PALETTE: [&str; 6] = [
    "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d62728",
];

/// The height of a legend row and of a stage-label level, in pixels.
const ROW: f64 = 14.0;

/// The width of `text` at 12 pixels in the browser's sans-serif, over-estimated (0.6 em a
/// character; the average is nearer 0.55) so that boxes laid out with it do not touch.
fn text_width(text: &str) -> f64 {
    7.2 * text.chars().count() as f64
}

/// Round tick values in `[lo, hi]`: the multiples of the smallest step of 1, 2 or 5 times a
/// power of ten that gives at most `max` of them (at least 1 with `integer`), and the step.
fn ticks(lo: f64, hi: f64, max: usize, integer: bool) -> (Vec<f64>, f64) {
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 || !span.is_finite() || max < 2 {
        return (vec![lo], 1.0);
    }
    let raw = span / (max - 1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude);
    if integer {
        step = step.max(1.0);
    }
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let values = (first..=last).map(|k| k as f64 * step).collect();
    (values, step)
}

/// A tick label with as many decimals as the step needs (`20`, `0.2`, `0.05`).
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10() - 1e-9).ceil().max(0.0) as usize
    };
    // `-0` reads as a mistake.
    let v = if v.abs() < step * 1e-9 { 0.0 } else { v };
    format!("{v:.decimals$}")
}

impl LineChart {
    /// A chart over steps `1..=last` with no series yet: x from 0.5 to `last + 0.5` (so the
    /// boundary after step `s` is at `s + 0.5`), ticks at integers, not stacked.
    pub fn over_steps(title: &str, x_label: &str, y_label: &str, last: f64) -> Self {
        LineChart {
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            x_range: (0.5, last.max(1.0) + 0.5),
            series: Vec::new(),
            vlines: Vec::new(),
            integer_x: true,
            stacked: false,
        }
    }

    /// The pixel x of `x` in the drawn SVG (the plot area spans `LEFT..WIDTH - RIGHT`, i.e.
    /// 56..984 of a 1000-pixel-wide image).
    pub fn x_px(&self, x: f64) -> f64 {
        let (lo, hi) = self.x_range;
        let span = if hi > lo { hi - lo } else { 1.0 };
        LEFT + (WIDTH - LEFT - RIGHT) * (x - lo) / span
    }

    /// The y values drawn: each series' own, or in a stacked chart the running sums.
    fn drawn(&self) -> Vec<Vec<(f64, f64)>> {
        if !self.stacked {
            return self.series.iter().map(|s| s.points.clone()).collect();
        }
        let mut base: Vec<f64> = Vec::new();
        self.series
            .iter()
            .map(|s| {
                base.resize(base.len().max(s.points.len()), 0.0);
                s.points
                    .iter()
                    .zip(base.iter_mut())
                    .map(|(&(x, y), b)| {
                        *b += if y.is_finite() { y } else { 0.0 };
                        (x, *b)
                    })
                    .collect()
            })
            .collect()
    }

    /// The legend's entries as `(x, row)` positions, rows filled left to right across the
    /// plot area's width, and the number of rows.
    fn legend_layout(&self) -> (Vec<(f64, usize)>, usize) {
        let right = WIDTH - RIGHT;
        let (mut x, mut row) = (LEFT, 0);
        let mut out = Vec::new();
        for s in &self.series {
            let w = 20.0 + text_width(&s.name);
            if x > LEFT && x + w > right {
                row += 1;
                x = LEFT;
            }
            out.push((x, row));
            x += w + 18.0;
        }
        let rows = if self.series.is_empty() { 0 } else { row + 1 };
        (out, rows)
    }
}

/// The y range drawn: from `min(0, smallest y)` to a round bound above the largest.
fn y_range(drawn: &[Vec<(f64, f64)>]) -> (f64, f64) {
    let ys = drawn
        .iter()
        .flat_map(|s| s.iter().map(|p| p.1))
        .filter(|y| y.is_finite());
    let (lo, hi) = ys.fold((0.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let hi = nice_max(hi as f32);
    let lo = if lo < 0.0 { -nice_max(-lo as f32) } else { 0.0 };
    (lo, hi)
}

/// The SVG of a [`LineChart`].
pub fn line_chart_svg(chart: &LineChart) -> String {
    let drawn = chart.drawn();
    let (ylo, yhi) = y_range(&drawn);
    let (legend, rows) = chart.legend_layout();
    // The plot area starts below the last legend row and keeps its height.
    let top = TOP + ROW * rows.saturating_sub(1) as f64;
    let height = HEIGHT + top - TOP;
    let pw = WIDTH - LEFT - RIGHT;
    let ph = height - top - BOTTOM;
    let y = |v: f64| top + ph * (1.0 - (v - ylo) / (yhi - ylo));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text class="title" x="{LEFT}" y="18" font-size="14">{}</text>"#,
        xml(&chart.title)
    );
    let _ = writeln!(
        s,
        r##"<path d="M{LEFT},{top} V{} H{}" fill="none" stroke="#333"/>"##,
        top + ph,
        LEFT + pw
    );
    let (yticks, ystep) = ticks(ylo, yhi, 6, false);
    for v in yticks {
        let _ = writeln!(
            s,
            r##"<line x1="{}" x2="{LEFT}" y1="{yy:.2}" y2="{yy:.2}" stroke="#333"/><text class="ytick" x="{}" y="{:.2}" text-anchor="end">{}</text>"##,
            LEFT - 4.0,
            LEFT - 6.0,
            y(v) + 4.0,
            tick_label(v, ystep),
            yy = y(v)
        );
    }
    let (xlo, xhi) = chart.x_range;
    let (xticks, xstep) = ticks(xlo, xhi, 10, chart.integer_x);
    for v in xticks {
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.2}" x2="{xx:.2}" y1="{}" y2="{}" stroke="#333"/><text class="xtick" x="{xx:.2}" y="{}" text-anchor="middle">{}</text>"##,
            top + ph,
            top + ph + 4.0,
            top + ph + 17.0,
            tick_label(v, xstep),
            xx = chart.x_px(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        height - 8.0,
        xml(&chart.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(14,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        xml(&chart.y_label)
    );
    // Stacked bands first, so that lines and labels are drawn over them.
    if chart.stacked {
        let mut below: Vec<(f64, f64)> = Vec::new();
        for (i, points) in drawn.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let mut d = String::new();
            for (k, &(px, py)) in points.iter().enumerate() {
                let cmd = if k == 0 { 'M' } else { 'L' };
                let _ = write!(d, "{cmd}{:.2},{:.2} ", chart.x_px(px), y(py));
            }
            for k in (0..points.len()).rev() {
                let (px, base) = below.get(k).copied().unwrap_or((points[k].0, 0.0));
                let _ = write!(d, "L{:.2},{:.2} ", chart.x_px(px), y(base));
            }
            if !points.is_empty() {
                let _ = writeln!(
                    s,
                    r#"<path class="band" d="{}Z" fill="{colour}" fill-opacity="0.35" stroke="none"/>"#,
                    d
                );
            }
            below = points.clone();
        }
    }
    // Stage boundaries: the labels inside the plot area, along its top, each on the first
    // level where it overlaps no other label, right of its line unless that leaves the area.
    let mut placed: Vec<(f64, f64, usize)> = Vec::new();
    for v in &chart.vlines {
        let xx = chart.x_px(v.x);
        let w = text_width(&v.label);
        let (x0, anchor, tx) = if xx + 3.0 + w <= LEFT + pw {
            (xx + 3.0, "start", xx + 3.0)
        } else {
            (xx - 3.0 - w, "end", xx - 3.0)
        };
        let level = (0..)
            .find(|&l| {
                !placed
                    .iter()
                    .any(|&(a, b, pl)| pl == l && x0 < b + 4.0 && a < x0 + w + 4.0)
            })
            .unwrap_or(0);
        placed.push((x0, x0 + w, level));
        let _ = writeln!(
            s,
            r##"<line class="vline" data-x="{}" x1="{xx:.2}" x2="{xx:.2}" y1="{top}" y2="{}" stroke="#888" stroke-dasharray="4,3"/><text class="vlabel" x="{tx:.2}" y="{}" text-anchor="{anchor}" fill="#555" stroke="white" stroke-width="3" paint-order="stroke">{}</text>"##,
            v.x,
            top + ph,
            top + 12.0 + ROW * level as f64,
            xml(&v.label)
        );
    }
    for (i, (series, points)) in chart.series.iter().zip(&drawn).enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let mut d = String::new();
        let mut pen_down = false;
        for &(px, py) in points {
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
    }
    // The legend, in rows between the title and the plot area.
    s.push_str("<g class=\"legend\">");
    for (i, (series, &(lx, row))) in chart.series.iter().zip(&legend).enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let ly = 30.0 + ROW * row as f64;
        let swatch = if chart.stacked {
            format!(
                r#"<rect x="{lx}" y="{}" width="16" height="8" fill="{colour}" fill-opacity="0.6"/>"#,
                ly - 4.0
            )
        } else {
            format!(
                r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2"/>"#,
                lx + 16.0
            )
        };
        let _ = write!(
            s,
            r#"{swatch}<text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            ly + 4.0,
            xml(&series.name)
        );
    }
    s.push_str("</g>\n");
    let _ = writeln!(s, "</svg>");
    s
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
            integer_x: false,
            stacked: false,
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

    /// The `<text class="{class}">` elements of `svg`: x, y, anchor and content.
    fn texts(svg: &str, class: &str) -> Vec<(f64, f64, String, String)> {
        let attr = |tag: &str, name: &str| {
            let at = tag
                .find(&format!(" {name}=\""))
                .map(|i| i + name.len() + 3)?;
            Some(tag[at..at + tag[at..].find('"')?].to_string())
        };
        svg.match_indices(&format!("<text class=\"{class}\""))
            .map(|(i, _)| {
                let tag = &svg[i..i + svg[i..].find('>').unwrap()];
                let body = &svg[i + tag.len() + 1..];
                let body = &body[..body.find("</text>").unwrap()];
                (
                    attr(tag, "x").unwrap().parse().unwrap(),
                    attr(tag, "y").unwrap().parse().unwrap(),
                    attr(tag, "text-anchor").unwrap_or_else(|| "start".into()),
                    body.to_string(),
                )
            })
            .collect()
    }

    /// The box a text of 12 pixels occupies, from its anchor point (estimated as the layout
    /// estimates it).
    fn text_box(x: f64, y: f64, anchor: &str, text: &str) -> (f64, f64, f64, f64) {
        let w = text_width(text);
        let x0 = match anchor {
            "end" => x - w,
            "middle" => x - w / 2.0,
            _ => x,
        };
        (x0, y - 10.0, x0 + w, y + 3.0)
    }

    fn overlap(a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)) -> bool {
        a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
    }

    #[test]
    fn ticks_are_round_multiples_and_integers_over_steps() {
        fn check(lo: f64, hi: f64, max: usize, integer: bool, want: &[f64]) {
            let (got, _) = ticks(lo, hi, max, integer);
            assert_eq!(got, want, "ticks({lo}, {hi}, {max}, {integer})");
        }
        let every = |step: f64, n: usize| (1..=n).map(|k| step * k as f64).collect::<Vec<_>>();
        check(0.5, 160.5, 10, true, &every(20.0, 8));
        check(0.5, 6.5, 10, true, &every(1.0, 6));
        check(0.5, 1.5, 10, true, &[1.0]);
        check(0.5, 3.5, 10, true, &[1.0, 2.0, 3.0]);
        check(0.5, 510.5, 10, true, &every(100.0, 5));
        check(0.5, 3.5, 10, false, &[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]);
        check(
            0.0,
            1.0,
            6,
            false,
            &[0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0],
        );
        check(0.0, 3.0, 6, false, &[0.0, 1.0, 2.0, 3.0]);
        check(-0.5, 0.5, 6, false, &[-0.4, -0.2, 0.0, 0.2, 0.4]);
        assert_eq!(tick_label(20.0, 20.0), "20");
        assert_eq!(tick_label(0.6000000000000001, 0.2), "0.6");
        assert_eq!(tick_label(0.05, 0.05), "0.05");
        assert_eq!(tick_label(-1e-17, 0.2), "0.0");
    }

    /// Issue 39: the report's step axis read 0.50, 80.50, 160.50 and the stage labels were
    /// drawn over the legend.
    #[test]
    fn issue_39_step_ticks_are_integers_and_the_legend_clears_the_stage_labels() {
        let series = |name: &str| Series {
            name: name.into(),
            points: (1..=160)
                .map(|k| (f64::from(k), f64::from(k % 7)))
                .collect(),
        };
        let chart = LineChart {
            series: vec![
                series("all traces"),
                series("successful traces"),
                series("kept successful traces"),
            ],
            vlines: [(40.5, "short"), (44.5, "long"), (158.5, "hard")]
                .iter()
                .map(|&(x, name)| VLine {
                    x,
                    label: format!("end of `{name}`"),
                })
                .collect(),
            ..LineChart::over_steps("tool error rate per RL step", "RL step", "share", 160.0)
        };
        let svg = line_chart_svg(&chart);
        let xticks = texts(&svg, "xtick");
        let labels: Vec<&str> = xticks.iter().map(|t| t.3.as_str()).collect();
        assert_eq!(labels, ["20", "40", "60", "80", "100", "120", "140", "160"]);
        // Each tick sits at its step: 56 + 928 · (20 − 0.5) / 160 = 169.1.
        assert!((xticks[0].0 - 169.1).abs() < 1e-9, "{xticks:?}");

        let legend_at = svg.find("<g class=\"legend\">").unwrap();
        let legend = &svg[legend_at..legend_at + svg[legend_at..].find("</g>").unwrap()];
        let legend_boxes: Vec<_> = legend
            .match_indices("<text x=\"")
            .map(|(i, _)| {
                let tag = &legend[i..];
                let x: f64 = tag[9..9 + tag[9..].find('"').unwrap()].parse().unwrap();
                let y_at = tag.find(" y=\"").unwrap() + 4;
                let y: f64 = tag[y_at..y_at + tag[y_at..].find('"').unwrap()]
                    .parse()
                    .unwrap();
                let text = &tag[tag.find('>').unwrap() + 1..tag.find("</text>").unwrap()];
                text_box(x, y, "start", text)
            })
            .collect();
        assert_eq!(legend_boxes.len(), 3, "{legend}");
        let stage_boxes: Vec<_> = texts(&svg, "vlabel")
            .iter()
            .map(|(x, y, anchor, text)| text_box(*x, *y, anchor, &text.replace("&#96;", "`")))
            .collect();
        assert_eq!(stage_boxes.len(), 3);
        for (i, a) in stage_boxes.iter().enumerate() {
            // Inside the plot area (56..984 across, from y = 40 down).
            assert!(a.0 >= 56.0 && a.2 <= 984.0 && a.1 >= 40.0, "{a:?}");
            for l in &legend_boxes {
                assert!(!overlap(*a, *l), "stage label {a:?} over legend {l:?}");
            }
            for b in &stage_boxes[i + 1..] {
                assert!(!overlap(*a, *b), "stage labels {a:?} and {b:?}");
            }
        }
        // The last boundary is near the right edge: its label goes left of the line.
        assert_eq!(texts(&svg, "vlabel")[2].2, "end");
    }

    #[test]
    fn stacked_series_are_drawn_as_running_sums() {
        let chart = LineChart {
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(1.0, 1.0), (2.0, 2.0)],
                },
                Series {
                    name: "b".into(),
                    points: vec![(1.0, 2.0), (2.0, f64::NAN)],
                },
            ],
            stacked: true,
            ..LineChart::over_steps("t", "step", "seconds", 2.0)
        };
        let svg = line_chart_svg(&chart);
        assert_eq!(svg.matches(r#"class="band""#).count(), 2);
        // y from 0 to 3 over 256 pixels from 40: b's top edge is at 3 (y = 40) at step 1 and at
        // 2 + 0 (y = 125.33) at step 2. x: 56 + 928 · 0.5 / 2 = 288, 56 + 928 · 1.5 / 2 = 752.
        assert!(
            svg.contains(r#"data-name="b" d="M288.00,40.00 L752.00,125.33""#),
            "{svg}"
        );
        let yticks: Vec<String> = texts(&svg, "ytick").into_iter().map(|t| t.3).collect();
        assert_eq!(yticks, ["0", "1", "2", "3"]);
    }

    /// The entropy plot's ticks are round: each label is a multiple of its axis's step, the
    /// step 1, 2 or 5 times a power of ten (token positions: whole numbers), the first at 0.
    #[test]
    fn entropy_ticks_are_round_values() {
        use rstar_episode::episode::{ByteTokenizer, Episode, Limits};
        use rstar_episode::template::Template;
        let tok = ByteTokenizer;
        for (len, peak) in [(437usize, 2.3f32), (61, 0.42), (2003, 5.9)] {
            let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "q");
            ep.push_assistant_text(&format!("{}<answer>1</answer>", "x".repeat(len)))
                .unwrap();
            let mut t = ep.finish().unwrap();
            let n = t.response_ids.len();
            t.entropies = (0..n).map(|i| peak * (i % 7) as f32 / 6.0).collect();
            let svg = entropy_svg(&t, None, 20).unwrap();
            for (class, whole) in [("xtick", true), ("ytick", false)] {
                let values: Vec<f64> = texts(&svg, class)
                    .iter()
                    .map(|t| t.3.parse().unwrap())
                    .collect();
                assert!(values.len() >= 3, "{class}: {values:?}");
                assert_eq!(values[0], 0.0, "{class}: {values:?}");
                let step = values[1] - values[0];
                let mantissa = step / 10f64.powf(step.log10().floor());
                assert!(
                    [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-6),
                    "{class}: step {step} in {values:?}"
                );
                for (k, v) in values.iter().enumerate() {
                    assert!((v - step * k as f64).abs() < 1e-6, "{class}: {values:?}");
                }
                if whole {
                    assert!(values.iter().all(|v| v.fract() == 0.0), "{values:?}");
                    assert!(*values.last().unwrap() <= n as f64, "{values:?} over {n}");
                }
            }
        }
    }

    #[test]
    fn nice_max_rounds_up() {
        assert_eq!(nice_max(2.3), 3.0);
        assert_eq!(nice_max(0.42), 0.5);
        assert_eq!(nice_max(0.0), 0.1);
    }

    #[test]
    fn a_trajectory_without_entropies_cannot_be_plotted() {
        use rstar_episode::episode::{ByteTokenizer, Episode, Limits};
        use rstar_episode::template::Template;
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
