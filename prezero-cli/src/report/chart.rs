//! Charts: inline SVG drawn by plotters, each in a `<figure>` whose title and
//! legend are HTML beside the plot, so a legend never covers data. Axes are
//! plotted in their own scale (log10 of the value on a log axis) with ticks
//! chosen and labelled here: round numbers with SI or binary units.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::fmt::esc;

const W: u32 = 640;
const H: u32 = 320;

/// Colours that stay apart on white and for most colour-blind readers
/// (Observable's ten).
const PALETTE: [(u8, u8, u8); 10] = [
    (0x42, 0x69, 0xd0),
    (0xef, 0xb1, 0x18),
    (0xff, 0x72, 0x5c),
    (0x6c, 0xc5, 0xb0),
    (0x3c, 0xa9, 0x51),
    (0xff, 0x8a, 0xb7),
    (0xa4, 0x63, 0xf2),
    (0x97, 0xbb, 0xf5),
    (0x9c, 0x6b, 0x4e),
    (0x94, 0x98, 0xa0),
];

/// Series past the palette's length are told apart by dashes.
fn dashed(i: usize) -> bool {
    i >= PALETTE.len()
}

fn colour(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

pub struct Axis {
    /// What the axis measures, in its unit when the ticks carry none.
    pub desc: &'static str,
    pub log: bool,
    /// A tick's text from its value.
    pub label: fn(f64) -> String,
    /// Ticks at the data's own values (sizes measured, lines touched) rather
    /// than at round numbers.
    pub at_data: bool,
}

/// An axis laid out: the plotted range and the ticks on it, both in plotted
/// units, each tick with its text.
#[derive(Clone)]
struct Layout {
    range: Range<f64>,
    ticks: Vec<(f64, String)>,
}

impl Layout {
    fn label(&self, at: f64) -> String {
        self.ticks
            .iter()
            .find(|(t, _)| (t - at).abs() < 1e-9)
            .map_or_else(String::new, |(_, l)| l.clone())
    }
}

/// plotters places values on a laid-out axis linearly, with grid lines and
/// labels at its ticks only (no light lines between).
impl Ranged for Layout {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.range.clone()).map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.iter().map(|(t, _)| *t).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl Axis {
    fn plotted(&self, v: f64) -> f64 {
        if self.log {
            v.log10()
        } else {
            v
        }
    }

    /// Values a log axis cannot place (zero, negative) are dropped.
    fn shows(&self, v: f64) -> bool {
        v.is_finite() && (!self.log || v > 0.0)
    }

    /// The range and ticks for `values` (each one the axis shows); a linear
    /// axis starts at zero.
    fn layout(&self, values: &[f64]) -> Layout {
        let lo = values.iter().copied().fold(f64::MAX, f64::min);
        let hi = values.iter().copied().fold(f64::MIN, f64::max);
        let tick = |v: f64| (self.plotted(v), (self.label)(v));
        if !self.log {
            let top = if hi > 0.0 { hi * 1.12 } else { 1.0 };
            let step = nice_step(top);
            let ticks = (0..)
                .map(|i| i as f64 * step)
                .take_while(|v| *v <= top)
                .map(tick)
                .collect();
            return Layout {
                range: 0.0..top,
                ticks,
            };
        }
        let (l, h) = (lo.log10(), hi.log10());
        let pad = ((h - l) * 0.05).max(0.25);
        let range = l - pad..h + pad;
        let ticks = if self.at_data {
            let mut sorted = values.to_vec();
            sorted.sort_by(f64::total_cmp);
            sorted.dedup();
            // No two labels closer than a ninth of the axis.
            let gap = (range.end - range.start) / 9.0;
            let mut kept: Vec<f64> = Vec::new();
            for v in sorted {
                if kept.last().is_none_or(|k| v.log10() - k.log10() >= gap) {
                    kept.push(v);
                }
            }
            kept
        } else {
            let decades =
                (range.start.ceil() as i32..=range.end.floor() as i32).map(|k| 10f64.powi(k));
            let mut v: Vec<f64> = decades.collect();
            if v.len() < 2 {
                // Within a decade or two: 1, 2 and 5 of each.
                v = (range.start.floor() as i32..=range.end.ceil() as i32)
                    .flat_map(|k| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(k)))
                    .filter(|x| range.contains(&x.log10()))
                    .collect();
            }
            v
        };
        Layout {
            range,
            ticks: ticks.into_iter().map(tick).collect(),
        }
    }
}

/// A round step (1, 2 or 5 times a power of ten) giving about five ticks up to `top`.
fn nice_step(top: f64) -> f64 {
    let raw = top / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    p * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Lines through each series' points.
pub struct LineChart<'a> {
    pub title: &'a str,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

/// The figure, or nothing when no series has a point to draw (the table
/// below says what there is).
pub fn line_chart(c: &LineChart) -> String {
    let series: Vec<(usize, Vec<(f64, f64)>)> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let p = s.points.iter().copied();
            let shown = p.filter(|&(x, y)| c.x.shows(x) && c.y.shows(y));
            (i, shown.collect::<Vec<_>>())
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return String::new();
    }
    let all = series.iter().flat_map(|(_, p)| p.iter());
    let (xs, ys): (Vec<f64>, Vec<f64>) = all.copied().unzip();
    let (xl, yl) = (c.x.layout(&xs), c.y.layout(&ys));
    let svg = svg(|root| {
        let mut chart = frame(root, &c.x, &xl, &c.y, &yl)?;
        for (i, p) in &series {
            let at: Vec<(f64, f64)> = p
                .iter()
                .map(|&(x, y)| (c.x.plotted(x), c.y.plotted(y)))
                .collect();
            let col = colour(*i);
            let style = col.stroke_width(2);
            if dashed(*i) {
                chart.draw_series(DashedLineSeries::new(at.iter().copied(), 6, 4, style))?;
            } else {
                chart.draw_series(LineSeries::new(at.iter().copied(), style))?;
            }
            chart.draw_series(at.iter().map(|&p| Circle::new(p, 3, col.filled())))?;
        }
        Ok(())
    });
    let names = series.iter().map(|(i, _)| (*i, c.series[*i].name.as_str()));
    figure(c.title, &svg, names, Swatch::Line)
}

/// Groups along x, one bar per series in each group.
pub struct BarChart<'a> {
    pub title: &'a str,
    pub y: Axis,
    pub groups: Vec<String>,
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

pub fn bar_chart(c: &BarChart) -> String {
    let ys: Vec<f64> = c
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .filter(|&y| c.y.shows(y))
        .collect();
    if ys.is_empty() {
        return String::new();
    }
    let yl = c.y.layout(&ys);
    let n = c.groups.len();
    let xl = Layout {
        range: 0.0..n as f64,
        ticks: (c.groups.iter().enumerate())
            .map(|(g, name)| (g as f64 + 0.5, name.clone()))
            .collect(),
    };
    let x = Axis {
        desc: "",
        log: false,
        label: |_| String::new(),
        at_data: false,
    };
    let k = c.series.len() as f64;
    let svg = svg(|root| {
        let mut chart = frame(root, &x, &xl, &c.y, &yl)?;
        let base = yl.range.start;
        for (j, (_, v)) in c.series.iter().enumerate() {
            let col = colour(j);
            chart.draw_series(v.iter().enumerate().filter_map(|(g, y)| {
                let y = (*y).filter(|&y| c.y.shows(y))?;
                let x = g as f64 + 0.1 + 0.8 * j as f64 / k;
                let top = [(x, base), (x + 0.8 / k, c.y.plotted(y))];
                Some(Rectangle::new(top, col.filled()))
            }))?;
        }
        Ok(())
    });
    let names = c
        .series
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (i, n.as_str()));
    figure(c.title, &svg, names, Swatch::Bar)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Layout, Layout>>;

/// Axes, ticks and grid, ready for the series.
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    x: &Axis,
    xl: &Layout,
    y: &Axis,
    yl: &Layout,
) -> Result<Chart<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(if x.desc.is_empty() { 28 } else { 44 })
        .y_label_area_size(70)
        .build_cartesian_2d(xl.clone(), yl.clone())?;
    chart
        .configure_mesh()
        .x_desc(x.desc)
        .y_desc(y.desc)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
        .x_label_formatter(&|v| xl.label(*v))
        .y_label_formatter(&|v| yl.label(*v))
        .draw()?;
    Ok(chart)
}

fn svg(
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Box<dyn std::error::Error>>,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        // Drawing into a String fails only on plotters' own range errors;
        // what was drawn up to one stays, and the table below has the numbers.
        let _ = root.fill(&WHITE);
        let _ = draw(&root);
        let _ = root.present();
    }
    round_font_sizes(&svg)
}

/// plotters' SVG backend writes a font's size divided by 1.24 with every
/// digit (`font-size="10.483870967741936"`); one decimal is all a browser uses.
fn round_font_sizes(svg: &str) -> String {
    const ATTR: &str = "font-size=\"";
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find(ATTR) {
        let (head, tail) = rest.split_at(at + ATTR.len());
        out.push_str(head);
        let end = tail.find('"').unwrap_or(tail.len());
        match tail[..end].parse::<f64>() {
            Ok(size) => out.push_str(&format!("{size:.1}")),
            Err(_) => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// What a legend entry shows of its series.
enum Swatch {
    Line,
    Bar,
}

/// The chart with its title above and its legend to the right, in HTML.
fn figure<'a>(
    title: &str,
    svg: &str,
    names: impl Iterator<Item = (usize, &'a str)>,
    swatch: Swatch,
) -> String {
    let legend: String = names
        .map(|(i, name)| {
            let RGBColor(r, g, b) = colour(i);
            let style = match swatch {
                Swatch::Line if dashed(i) => {
                    format!("border-top:3px dashed #{r:02x}{g:02x}{b:02x}")
                }
                Swatch::Line => format!("border-top:3px solid #{r:02x}{g:02x}{b:02x}"),
                Swatch::Bar => format!("background:#{r:02x}{g:02x}{b:02x};height:10px"),
            };
            format!("<li><i style=\"{style}\"></i>{}</li>", esc(name))
        })
        .collect();
    format!(
        "<figure><figcaption>{}</figcaption><div class=\"chart\">{svg}<ul class=\"legend\">{legend}</ul></div></figure>\n",
        esc(title)
    )
}
