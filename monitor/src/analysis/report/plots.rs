//! The report's plots, drawn as SVG by `plotters`. Every plot has time since the start of the
//! run on its x axis, a legend to the right of the plotting area (never over the data), the
//! user's marks as dashed vertical lines, and at most [`TOP_GROUPS`](super::model::TOP_GROUPS)
//! groups plus "other". Long series are downsampled first (see [`super::downsample`]).

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::downsample::{min_max, min_max_indices, BUCKETS};
use super::load::{RunData, SocketBytes, GPU_COLUMNS};
use super::model::{self, Model, Series};
use super::{color_rgb, mark_text};
use crate::units::format_bytes;

/// One plot of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    /// File name stem for the Markdown report (`report-<id>.svg`), and the HTML anchor.
    pub id: String,
    pub title: String,
    /// What it shows and how to read it.
    pub caption: String,
    pub svg: String,
}

/// What a y axis counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    Bytes,
    BytesPerSecond,
    /// CPU% (100 = one core) or utilization.
    Percent,
    Seconds,
    Count,
    Watts,
}

/// The (empty) suffix of count axes, which take whole ticks only.
const COUNT_SUFFIX: &str = "";

/// Divisor and suffix for axis labels of values up to `max`.
fn scale(unit: Unit, max: f64) -> (f64, &'static str) {
    match unit {
        Unit::Bytes | Unit::BytesPerSecond => {
            const UNITS: [&str; 5] = [" B", " KiB", " MiB", " GiB", " TiB"];
            const RATES: [&str; 5] = [" B/s", " KiB/s", " MiB/s", " GiB/s", " TiB/s"];
            let mut div = 1.0;
            let mut k = 0;
            while max / div >= 1024.0 && k + 1 < UNITS.len() {
                div *= 1024.0;
                k += 1;
            }
            (
                div,
                if unit == Unit::Bytes {
                    UNITS[k]
                } else {
                    RATES[k]
                },
            )
        }
        Unit::Percent => (1.0, "%"),
        Unit::Seconds => (1.0, " s"),
        Unit::Count => (1.0, COUNT_SUFFIX),
        Unit::Watts => (1.0, " W"),
    }
}

/// A tick label of a value already in the axis's unit.
fn axis_label(v: f64, suffix: &str) -> String {
    let text = if v == v.round() || v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    };
    format!("{text}{suffix}")
}

/// Seconds on the time axis, with as many decimals as a run of `span` seconds needs.
fn time_label(t: f64, span: f64) -> String {
    if span >= 20.0 {
        format!("{t:.0}")
    } else if span >= 2.0 {
        format!("{t:.1}")
    } else {
        format!("{t:.2}")
    }
}

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 320;
const LEGEND_WIDTH: u32 = 190;
const FONT: &str = "sans-serif";

type PlotResult<T> = Result<T, String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// A mark as (seconds since t0, text).
pub type MarkLine = (f64, String);

fn marks_of(data: &RunData, model: &Model) -> Vec<MarkLine> {
    super::drawn_marks(&data.marks)
        .into_iter()
        .map(|m| (model.secs(m.time_ns), mark_text(m)))
        .collect()
}

fn series_color(s: &Series, fallback: usize) -> RGBColor {
    let (r, g, b) = match s.group {
        Some(g) => color_rgb(Some(g)),
        None if s.name.starts_with("other") => color_rgb(None),
        None => color_rgb(Some(fallback)),
    };
    RGBColor(r, g, b)
}

/// Draws the legend into `area`: a swatch and a name per series.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(String, RGBColor)],
) -> PlotResult<()> {
    for (k, (name, color)) in entries.iter().enumerate() {
        let y = 24 + 18 * k as i32;
        area.draw(&Rectangle::new([(8, y - 5), (22, y + 5)], color.filled()))
            .map_err(err)?;
        let name = if name.chars().count() > 24 {
            let mut s: String = name.chars().take(23).collect();
            s.push('…');
            s
        } else {
            name.clone()
        };
        area.draw(&Text::new(name, (28, y - 6), (FONT, 13)))
            .map_err(err)?;
    }
    Ok(())
}

/// The largest end an axis is drawn to.
const AXIS_LIMIT: f64 = 1e30;

/// An axis's end as plotters can tick it: finite, positive and at most [`AXIS_LIMIT`]. (The data
/// is made sane where it is read, `load::sane`; this is the last guard: plotters's key-point
/// search never ends on an infinite or NaN range.)
fn axis_end(end: f64) -> f64 {
    if end.is_finite() && end > 0.0 {
        end.min(AXIS_LIMIT)
    } else if end.is_finite() {
        1e-9
    } else if end == f64::INFINITY {
        AXIS_LIMIT
    } else {
        1.0
    }
}

/// The frame of a full-size plot on `area`: `title` above, the time since the start (0 to `x_max`
/// s) across, 0 to `y_max` up with labels in the axis unit `suffix`, and the grid.
fn time_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    x_max: f64,
    y_max: f64,
    suffix: &str,
) -> PlotResult<ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>> {
    let (x_max, y_max) = (axis_end(x_max), axis_end(y_max));
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 17))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .x_labels(10)
        .y_labels(6)
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(228, 231, 235))
        .x_label_formatter(&|v| time_label(*v, x_max))
        .y_label_formatter(&|v| {
            // Counts have whole ticks only: no "0.5 processes".
            if suffix == COUNT_SUFFIX && v.fract() != 0.0 {
                String::new()
            } else {
                axis_label(*v, suffix)
            }
        })
        .label_style((FONT, 12))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// A line chart of `series` (already in the plot's units) with marks and optional horizontal
/// reference lines.
fn line_chart(
    title: &str,
    unit: Unit,
    series: &[Series],
    marks: &[MarkLine],
    x_max: f64,
    hlines: &[(f64, String)],
) -> PlotResult<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let y_data = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        let y_max = hlines
            .iter()
            .map(|h| h.0)
            .fold(y_data, f64::max)
            .max(if unit == Unit::Percent { 1.0 } else { 1e-9 })
            * 1.08;
        // Drawn in the axis's unit (MiB, GiB, ...), so its ticks are round numbers of it.
        let (div, suffix) = scale(unit, y_max);
        let y_max = y_max / div;
        let x_max = x_max.max(1e-3);
        let mut chart = time_chart(&plot_area, title, x_max, y_max, suffix)?;
        let mut entries = Vec::new();
        for (k, s) in series.iter().enumerate() {
            let color = series_color(s, k);
            let points = min_max(&s.points, BUCKETS)
                .into_iter()
                .map(|(x, y)| (x, y / div));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(err)?;
            entries.push((s.name.clone(), color));
        }
        for (y, label) in hlines {
            let y = &(y / div);
            let grey = RGBColor(90, 90, 90);
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, *y), (x_max, *y)],
                    6,
                    4,
                    grey.stroke_width(1),
                ))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (x_max * 0.01, *y),
                    (FONT, 12).into_font().color(&grey),
                )))
                .map_err(err)?;
        }
        draw_marks(&mut chart, marks, y_max)?;
        legend(&legend_area, &entries)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn draw_marks(
    chart: &mut ChartContext<
        '_,
        SVGBackend<'_>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    marks: &[MarkLine],
    y_max: f64,
) -> PlotResult<()> {
    let red = RGBColor(192, 57, 43);
    let x_span = chart.x_range().end - chart.x_range().start;
    for (k, (x, label)) in marks.iter().enumerate() {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(*x, 0.0), (*x, y_max)],
                5,
                3,
                red.stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once({
                // Staggered, so marks close together keep readable labels; left of the line
                // near the right edge, so they stay inside the plot.
                let y = y_max * (1.0 - 0.06 * (k % 3) as f64);
                let style = (FONT, 11).into_font().color(&red);
                if *x > x_span * 0.8 {
                    let right = Pos::new(HPos::Right, VPos::Top);
                    Text::new(label.clone(), (*x - x_span * 0.004, y), style.pos(right))
                } else {
                    Text::new(label.clone(), (*x + x_span * 0.004, y), style)
                }
            }))
            .map_err(err)?;
    }
    Ok(())
}

fn has_data(series: &[Series]) -> bool {
    series.iter().any(|s| s.points.iter().any(|p| p.1 > 0.0))
}

/// Every plot the run has data for, in report order.
pub fn all(data: &RunData, model: &Model) -> PlotResult<Vec<Plot>> {
    let marks = marks_of(data, model);
    let x_max = model.secs(model.t1_ns);
    let mut plots = Vec::new();

    let plot = |id: &str, title: &str, caption: &str, unit: Unit, series: &[Series]| {
        group_plot(id, title, caption, unit, series, &marks, x_max)
    };
    let uss = model::sweep_series(model, |s| s.uss.map(|v| v as f64));
    match plot(
        "uss",
        "Private memory (USS) per group",
        "Sum of the USS of each group's processes at every sweep: the memory that ending them \
         would give back.",
        Unit::Bytes,
        &uss,
    )? {
        Some(uss) => plots.push(uss),
        None => {
            // `--memory-detail basic` records no USS: resident memory is what there is.
            let rss = model::sweep_series(model, |s| s.rss.map(|v| v as f64));
            plots.extend(plot(
                "rss",
                "Resident memory (RSS) per group",
                "Sum of the RSS of each group's processes at every sweep. The run has no USS \
                 (recorded with --memory-detail basic), so memory shared by several processes \
                 counts once per process here.",
                Unit::Bytes,
                &rss,
            )?);
        }
    }
    plots.extend(rss_vs_uss(model, &marks, x_max)?);
    plots.extend(stacked_private(data, model, &marks, x_max)?);
    plots.extend(plot(
        "cpu",
        "CPU per group",
        "Sum of the CPU% of each group's processes at every sweep (100% = one core busy). \
         Processes shorter than the sampling interval do not show here; the cumulative plot \
         below counts them.",
        Unit::Percent,
        &model::sweep_series(model, |s| Some(s.cpu_percent)),
    )?);
    plots.extend(plot(
        "cpu-time",
        "Cumulative CPU time per group",
        "CPU seconds used so far by each group (user + system). A process that exited keeps its \
         final, exact CPU time.",
        Unit::Seconds,
        &model::cumulative_cpu(data, model),
    )?);
    let io_caption = |moved: &str| {
        format!(
            "Bytes per second each group's processes caused to be {moved} storage, from the \
             read_bytes and write_bytes counters of consecutive samples (samples.parquet), \
             summed at every sweep. Cached I/O that never reached a disk does not count; I/O \
             after a process's last sweep, and processes shorter than the sampling interval, do \
             not show."
        )
    };
    plots.extend(plot(
        "io-read",
        "Storage reads per group",
        &io_caption("fetched from"),
        Unit::BytesPerSecond,
        &model::sweep_series(model, |s| s.read_per_s),
    )?);
    plots.extend(plot(
        "io-write",
        "Storage writes per group",
        &io_caption("sent to"),
        Unit::BytesPerSecond,
        &model::sweep_series(model, |s| s.write_per_s),
    )?);
    plots.extend(stacked_instances(
        &model::active_instances(data, model),
        &marks,
        x_max,
    )?);
    plots.extend(plot(
        "gpu-tree-memory",
        "GPU memory of the tree per group",
        "Sum of the GPU memory held by each group's processes at every sweep, over all GPUs \
         (gpu_processes.parquet). Only the tree's processes count; other programs on the GPU \
         show in the device-wide GPU memory plot.",
        Unit::Bytes,
        &model::sweep_series(model, |s| s.gpu_memory.map(|v| v as f64)),
    )?);
    plots.extend(gpu_plots(data, model, &marks, x_max)?);
    plots.extend(network(data, model)?);
    Ok(plots)
}

/// The plot of "Where the time went": the tree's threads on a CPU ("cores used") and on a CPU
/// or runnable ("cores wanted") between sweeps, from every sample row ([`model::load`]), and
/// how many of its processes were alive (exact steps from their start and end times), against
/// the cores the run had (a dashed line, when run.json says how many). None when no process ran.
pub fn parallelism(data: &RunData, model: &Model, cores: Option<f64>) -> PlotResult<Option<Plot>> {
    let alive = model::running_processes(data, model);
    if !has_data(std::slice::from_ref(&alive)) {
        return Ok(None);
    }
    let peak = alive.points.iter().map(|p| p.1).fold(0.0, f64::max);
    let intervals = model::load(data, model);
    let waits_known = data.samples.iter().any(|s| s.run_queue_percent.is_some());
    let mut series = Vec::new();
    if !intervals.is_empty() {
        if waits_known {
            series.push(model::interval_steps(
                model,
                &intervals,
                "cores wanted",
                |i| i.cores_wanted,
            ));
        }
        series.push(model::interval_steps(
            model,
            &intervals,
            "cores used",
            |i| i.cores_used,
        ));
    }
    series.push(alive);
    let hlines: Vec<(f64, String)> = cores
        .map(|c| (c, format!("{c} cores")))
        .into_iter()
        .collect();
    let title = "Parallelism: cores used and wanted, processes alive";
    let against = match cores {
        Some(c) => format!(
            " The dashed line is the {c} cores the run had: cores used below it were left idle, \
             cores wanted above it were threads waiting for a CPU."
        ),
        None => String::new(),
    };
    let wanted = if waits_known {
        "Cores wanted: the threads of the tree on a CPU or runnable (waiting for a CPU), the \
         sum of cpu_percent and run_queue_percent over its processes divided by 100. "
    } else {
        "The run-queue delay is unknown (the tree was followed without the BTF tracepoints): \
         no line for the cores wanted. "
    };
    let load = if intervals.is_empty() {
        "No sample was taken: only the processes alive are drawn. ".to_string()
    } else {
        format!(
            "Cores used: the threads of the tree on a CPU, the sum of its processes' cpu_percent \
             (samples.parquet) divided by 100. {wanted}Both are averages over each interval \
             between sweeps: each sample row covers the time since its process's previous row \
             (or its start) and is spread evenly over it, exit rows included, so processes \
             shorter than the interval count. "
        )
    };
    Ok(Some(Plot {
        id: "parallelism".into(),
        title: title.into(),
        caption: format!(
            "{load}Processes alive: the processes of the tree alive at each moment, exact steps \
             from their start and end times (at most {} at once); alive is not busy, a make \
             waiting for its children is alive and asleep.{against}",
            peak as u64
        ),
        svg: line_chart(
            title,
            Unit::Count,
            &series,
            &marks_of(data, model),
            model.secs(model.t1_ns),
            &hlines,
        )?,
    }))
}

/// Socket bytes sent and received per group (processes.parquet `net_*`): two bars per group,
/// each IPv4/IPv6 (solid) then unix (light), for the [`model::TOP_GROUPS`] groups with the most
/// and "other". None when no process has the figures or no byte went through a socket.
pub fn network(data: &RunData, model: &Model) -> PlotResult<Option<Plot>> {
    let per_group = model::socket_bytes_per_group(data, model);
    if per_group.iter().flatten().all(|b| b.total() == 0) {
        return Ok(None);
    }
    let bars = network_bars(model, &per_group);
    let x_data = bars
        .iter()
        .map(|(_, _, b)| (b.inet_sent + b.unix_sent).max(b.inet_received + b.unix_received) as f64)
        .fold(1.0, f64::max)
        * 1.08;
    let (div, suffix) = scale(Unit::Bytes, x_data);
    let x_max = x_data / div;
    let title = "Socket bytes per group";
    let rows = 2 * bars.len();
    let height = (90 + 22 * rows) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let names: Vec<String> = bars
            .iter()
            .flat_map(|(name, _, _)| [format!("{name} sent"), format!("{name} received")])
            .collect();
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(title, (FONT, 17))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(170)
            .build_cartesian_2d(0f64..axis_end(x_max), (0..rows).into_segmented())
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("bytes, whole run")
            .x_labels(8)
            .y_labels(rows)
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(228, 231, 235))
            .x_label_formatter(&|v| axis_label(*v, suffix))
            .y_label_formatter(&|v| match v {
                // Segment 0 is at the bottom: the largest group's bars are at the top.
                SegmentValue::CenterOf(k) if *k < rows => names[rows - 1 - k].clone(),
                _ => String::new(),
            })
            .label_style((FONT, 12))
            .draw()
            .map_err(err)?;
        for (k, (_, color, bytes)) in bars.iter().enumerate() {
            let pairs = [
                (bytes.inet_sent, bytes.unix_sent),
                (bytes.inet_received, bytes.unix_received),
            ];
            for (j, (inet, unix)) in pairs.into_iter().enumerate() {
                let row = rows - 1 - (2 * k + j);
                let (inet, unix) = (inet as f64 / div, unix as f64 / div);
                let bar = |from: f64, to: f64, style: ShapeStyle| {
                    let mut rect = Rectangle::new(
                        [
                            (from, SegmentValue::Exact(row)),
                            (to, SegmentValue::Exact(row + 1)),
                        ],
                        style,
                    );
                    rect.set_margin(3, 3, 0, 0);
                    rect
                };
                chart
                    .draw_series([
                        bar(0.0, inet, color.filled()),
                        bar(inet, inet + unix, color.mix(0.35).filled()),
                    ])
                    .map_err(err)?;
            }
        }
        let grey = RGBColor(90, 90, 90);
        legend(
            &legend_area,
            &[
                ("IPv4/IPv6 sockets".to_string(), grey),
                ("unix sockets".to_string(), RGBColor(200, 200, 200)),
            ],
        )?;
        root.present().map_err(err)?;
    }
    let total = per_group
        .iter()
        .flatten()
        .fold(SocketBytes::default(), |mut a, b| {
            a.add(b);
            a
        });
    Ok(Some(Plot {
        id: "network".into(),
        title: title.into(),
        caption: format!(
            "Bytes each group's processes sent and received through sockets over their whole \
             lives (processes.parquet net_* columns: every send's and receive's length, payload \
             only): solid IPv4/IPv6, light unix sockets. In all: {} sent and {} received over \
             IPv4/IPv6, {} sent and {} received over unix sockets.",
            format_bytes(total.inet_sent),
            format_bytes(total.inet_received),
            format_bytes(total.unix_sent),
            format_bytes(total.unix_received),
        ),
        svg,
    }))
}

/// (name, colour, bytes) per bar pair, largest first: the [`model::TOP_GROUPS`] groups with the
/// most socket bytes, then "other" for the rest.
fn network_bars(
    model: &Model,
    per_group: &[Option<SocketBytes>],
) -> Vec<(String, RGBColor, SocketBytes)> {
    let mut order: Vec<usize> = (0..per_group.len())
        .filter(|&g| per_group[g].is_some_and(|b| b.total() > 0))
        .collect();
    order.sort_by_key(|&g| (std::cmp::Reverse(per_group[g].map_or(0, |b| b.total())), g));
    let rest = order.split_off(order.len().min(model::TOP_GROUPS));
    let mut bars: Vec<(String, RGBColor, SocketBytes)> = order
        .iter()
        .map(|&g| {
            let (r, gg, b) = color_rgb(Some(g));
            (
                model.groups[g].name.clone(),
                RGBColor(r, gg, b),
                per_group[g].unwrap_or_default(),
            )
        })
        .collect();
    if !rest.is_empty() {
        let mut other = SocketBytes::default();
        for &g in &rest {
            other.add(&per_group[g].unwrap_or_default());
        }
        let (r, g, b) = color_rgb(None);
        bars.push((
            format!("other ({} groups)", rest.len()),
            RGBColor(r, g, b),
            other,
        ));
    }
    bars
}

/// A line per group of `series` with the marks, or None when no point is above 0.
fn group_plot(
    id: &str,
    title: &str,
    caption: &str,
    unit: Unit,
    series: &[Series],
    marks: &[MarkLine],
    x_max: f64,
) -> PlotResult<Option<Plot>> {
    if !has_data(series) {
        return Ok(None);
    }
    Ok(Some(Plot {
        id: id.into(),
        title: title.into(),
        caption: caption.into(),
        svg: line_chart(title, unit, series, marks, x_max, &[])?,
    }))
}

/// Processes alive per group, stacked: each group a band whose height is its count, the top
/// edge the whole tree's; whole-number ticks.
fn stacked_instances(
    series: &[Series],
    marks: &[MarkLine],
    x_max: f64,
) -> PlotResult<Option<Plot>> {
    if !has_data(series) {
        return Ok(None);
    }
    let layers = model::stack_steps(series);
    let total = layers
        .last()
        .map_or(0.0, |l| l.points.iter().map(|p| p.1).fold(0.0, f64::max));
    let title = "Active instances per group, stacked";
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let y_max = (total + 1.0).ceil();
        let mut chart = time_chart(&plot_area, title, x_max.max(1e-3), y_max, COUNT_SUFFIX)?;
        let mut entries = Vec::new();
        // Top layer first, so each lower layer is drawn over the ones above it.
        for (k, layer) in layers.iter().enumerate().rev() {
            let color = series_color(layer, k);
            // A 5,000-process run changes its counts 10,000 times: the plot keeps what a pixel
            // column can show (its lowest and highest count), not every step.
            let points = min_max(&layer.points, BUCKETS);
            chart
                .draw_series(AreaSeries::new(points, 0.0, color.filled()).border_style(color))
                .map_err(err)?;
            entries.push((layer.name.clone(), color));
        }
        entries.reverse();
        draw_marks(&mut chart, marks, y_max)?;
        legend(&legend_area, &entries)?;
        root.present().map_err(err)?;
    }
    Ok(Some(Plot {
        id: "instances".into(),
        title: title.into(),
        caption: format!(
            "Processes of each group alive at each moment, from their exact start and end times, \
             stacked: a group's band is its count, the top edge the whole tree's (at most {}).",
            total as u64
        ),
        svg,
    }))
}

/// RSS and USS of the largest groups (by aggregate peak RSS), one small panel each: the gap
/// between them is memory the group shares (libraries, shared mappings, copy-on-write pages).
fn rss_vs_uss(model: &Model, marks: &[MarkLine], x_max: f64) -> PlotResult<Option<Plot>> {
    let mut groups: Vec<usize> = (0..model.groups.len())
        .filter(|&g| model.groups[g].agg_peak_uss.is_some_and(|v| v > 0))
        .collect();
    groups.sort_by(|&a, &b| {
        model.groups[b]
            .agg_peak_rss
            .cmp(&model.groups[a].agg_peak_rss)
            .then(a.cmp(&b))
    });
    groups.truncate(4);
    if groups.is_empty() {
        return Ok(None);
    }
    let (rows, cols) = match groups.len() {
        1 => (1, 1),
        2 => (1, 2),
        _ => (2, 2),
    };
    let height = if rows == 1 { HEIGHT } else { 2 * HEIGHT - 60 };
    let xs: Vec<f64> = model.sweeps.iter().map(|&t| model.secs(t)).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root
            .titled(
                "RSS vs USS per group (the gap is shared memory)",
                (FONT, 17),
            )
            .map_err(err)?;
        let panels = root.split_evenly((rows, cols));
        for (panel, &g) in panels.iter().zip(&groups) {
            let mut rss = vec![0.0; xs.len()];
            let mut uss = vec![0.0; xs.len()];
            for (sweep, sum) in &model.group_sweeps[g] {
                rss[*sweep] = sum.rss.unwrap_or(0) as f64;
                uss[*sweep] = sum.uss.unwrap_or(0) as f64;
            }
            let y_max = rss.iter().chain(&uss).copied().fold(1.0, f64::max) * 1.1;
            let (div, suffix) = scale(Unit::Bytes, y_max);
            let y_max = y_max / div;
            for v in rss.iter_mut().chain(uss.iter_mut()) {
                *v /= div;
            }
            let (r, gg, b) = color_rgb(Some(g));
            let color = RGBColor(r, gg, b);
            let mut chart = ChartBuilder::on(panel)
                .caption(&model.groups[g].name, (FONT, 14))
                .margin(8)
                .x_label_area_size(26)
                .y_label_area_size(64)
                .build_cartesian_2d(0f64..axis_end(x_max.max(1e-3)), 0f64..axis_end(y_max))
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_labels(6)
                .y_labels(5)
                .light_line_style(TRANSPARENT)
                .bold_line_style(RGBColor(228, 231, 235))
                .x_label_formatter(&|v| time_label(*v, x_max))
                .y_label_formatter(&|v| axis_label(*v, suffix))
                .label_style((FONT, 11))
                .draw()
                .map_err(err)?;
            let keep = |ys: &[f64]| -> Vec<(f64, f64)> {
                min_max_indices(&xs, ys, BUCKETS)
                    .into_iter()
                    .map(|i| (xs[i], ys[i]))
                    .collect()
            };
            chart
                .draw_series(
                    AreaSeries::new(keep(&rss), 0.0, color.mix(0.22))
                        .border_style(color.mix(0.6).stroke_width(1)),
                )
                .map_err(err)?
                .label("RSS")
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.22).filled())
                });
            chart
                .draw_series(
                    AreaSeries::new(keep(&uss), 0.0, color.mix(0.85))
                        .border_style(color.stroke_width(1)),
                )
                .map_err(err)?
                .label("USS")
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.85).filled())
                });
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .label_font((FONT, 11))
                .draw()
                .map_err(err)?;
            draw_marks(&mut chart, marks, y_max)?;
        }
        root.present().map_err(err)?;
    }
    Ok(Some(Plot {
        id: "rss-uss".into(),
        title: "RSS vs USS per group".into(),
        caption: "Light: resident memory (RSS); solid: private memory (USS), per group at every \
                  sweep. The gap is memory the group shares with other processes (libraries, \
                  copy-on-write pages), which RSS counts once per process."
            .into(),
        svg,
    }))
}

/// The whole tree's private memory, stacked by group, with its peak and the machine's memory.
/// The machine's memory as a line over the stacked plot, when it keeps the stack readable
/// (within 4× its peak); otherwise a note for the caption.
fn machine_memory_line(data: &RunData, peak: f64) -> (Option<f64>, String) {
    let machine = data
        .system
        .iter()
        .filter_map(|s| s.mem_total_bytes)
        .max()
        .map(|v| v as f64);
    match machine {
        Some(m) if m <= 4.0 * peak => (Some(m), String::new()),
        Some(m) => (
            None,
            format!(
                " The machine's memory, {}, is above the scale ({:.1}% of it at the peak).",
                format_bytes(m as u64),
                peak / m * 100.0
            ),
        ),
        None => (None, String::new()),
    }
}

fn stacked_private(
    data: &RunData,
    model: &Model,
    marks: &[MarkLine],
    x_max: f64,
) -> PlotResult<Option<Plot>> {
    let layers = model::sweep_series(model, |s| s.uss.map(|v| v as f64));
    if !has_data(&layers) {
        return Ok(None);
    }
    let n = model.sweeps.len();
    let xs: Vec<f64> = model.sweeps.iter().map(|&t| model.secs(t)).collect();
    let mut cum = cumulative(&layers, n);
    let tree = tree_uss_at_sweeps(data, model);
    let deduplicated = tree.iter().any(Option::is_some);
    scale_to_tree(&mut cum, &tree);
    let total: Vec<f64> = match deduplicated {
        // The tree's own figure where the sweep has it, else the stack's top.
        true => (0..n)
            .map(|i| tree[i].unwrap_or_else(|| cum.last().map_or(0.0, |c| c[i])))
            .collect(),
        false => cum.last().cloned().unwrap_or_default(),
    };
    let keep = min_max_indices(&xs, &total, BUCKETS);
    let (peak_i, peak) = first_peak(&total);
    let (hline, machine_note) = machine_memory_line(data, peak);
    let y_max = hline.unwrap_or(0.0).max(peak).max(1.0) * 1.12;
    let (div, suffix) = scale(Unit::Bytes, y_max);
    let y_max = y_max / div;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let mut chart = time_chart(
            &plot_area,
            "Total private memory (USS), stacked by group",
            x_max.max(1e-3),
            y_max,
            suffix,
        )?;
        let mut entries = Vec::new();
        // Top layer first, so each lower layer is drawn over the ones above it.
        for (k, layer) in layers.iter().enumerate().rev() {
            let color = series_color(layer, k);
            let points: Vec<(f64, f64)> = keep.iter().map(|&i| (xs[i], cum[k][i] / div)).collect();
            chart
                .draw_series(AreaSeries::new(points, 0.0, color.filled()).border_style(color))
                .map_err(err)?;
            entries.push((layer.name.clone(), color));
        }
        entries.reverse();
        if let Some(m) = hline {
            let grey = RGBColor(90, 90, 90);
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, m / div), (x_max, m / div)],
                    6,
                    4,
                    grey.stroke_width(1),
                ))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("machine memory {}", format_bytes(m as u64)),
                    (x_max * 0.01, m / div),
                    (FONT, 12).into_font().color(&grey),
                )))
                .map_err(err)?;
        }
        let px = xs.get(peak_i).copied().unwrap_or(0.0);
        chart
            .draw_series(std::iter::once(Circle::new(
                (px, peak / div),
                4,
                BLACK.filled(),
            )))
            .map_err(err)?;
        let label = format!("peak {} at {:.1} s", format_bytes(peak as u64), px);
        // Keep the label inside the plot: to the left of the peak when it is on the right.
        let pos = if px > x_max * 0.7 {
            (px - x_max * 0.25, peak / div)
        } else {
            (px + x_max * 0.01, peak / div)
        };
        chart
            .draw_series(std::iter::once(Text::new(label, pos, (FONT, 13))))
            .map_err(err)?;
        draw_marks(&mut chart, marks, y_max)?;
        legend(&legend_area, &entries)?;
        root.present().map_err(err)?;
    }
    Ok(Some(Plot {
        id: "memory-stacked".into(),
        title: "Total private memory".into(),
        caption: format!(
            "The tree's USS at every sweep, stacked by group; the dot marks its peak ({} at \
             {:.1} s).{}{machine_note}",
            format_bytes(peak as u64),
            xs.get(peak_i).copied().unwrap_or(0.0),
            match deduplicated {
                true => {
                    " The top edge is the tree's USS with each memory image counted once \
                     (system.parquet tree_uss_bytes): where the groups' sums count one twice (a \
                     vfork child before its exec shows its parent's memory), the layers are \
                     scaled down to it."
                }
                false => "",
            }
        ),
        svg,
    }))
}

/// Cumulative sums of the layers' values at each of `n` sweeps, bottom layer first; one set of
/// indices for all layers keeps them stacked.
fn cumulative(layers: &[Series], n: usize) -> Vec<Vec<f64>> {
    let mut cum: Vec<Vec<f64>> = Vec::with_capacity(layers.len());
    let mut running = vec![0.0; n];
    for layer in layers {
        for (r, p) in running.iter_mut().zip(&layer.points) {
            *r += p.1;
        }
        cum.push(running.clone());
    }
    cum
}

/// The index and value of the first highest of `values` (0, 0.0 when none is above 0).
fn first_peak(values: &[f64]) -> (usize, f64) {
    values.iter().copied().enumerate().fold(
        (0, 0.0),
        |best, (i, v)| if v > best.1 { (i, v) } else { best },
    )
}

/// system.parquet's `tree_uss_bytes` at each of the model's sweeps (None where the sweep has no
/// system row with it: runs of earlier versions, or without USS).
fn tree_uss_at_sweeps(data: &RunData, model: &Model) -> Vec<Option<f64>> {
    let by_time: std::collections::HashMap<i64, u64> = data
        .system
        .iter()
        .filter_map(|s| Some((s.time_ns, s.tree_uss_bytes?)))
        .collect();
    model
        .sweeps
        .iter()
        .map(|t| by_time.get(t).map(|&v| v as f64))
        .collect()
}

/// Scales the stacked layers (`cum`, cumulative, bottom first) of each sweep down to the tree's
/// own figure where their sum is above it: a memory image the samples count twice is then
/// counted once, in proportion to the layers. A sum at or below the tree's figure stays.
fn scale_to_tree(cum: &mut [Vec<f64>], tree: &[Option<f64>]) {
    let Some(top) = cum.last().cloned() else {
        return;
    };
    for (i, (&sum, once)) in top.iter().zip(tree).enumerate() {
        if let Some(once) = *once {
            if sum > once && sum > 0.0 {
                let k = once / sum;
                cum.iter_mut().for_each(|layer| layer[i] *= k);
            }
        }
    }
}

/// GPU utilization, memory and power (gpu.parquet), one line per GPU.
fn gpu_plots(
    data: &RunData,
    model: &Model,
    marks: &[MarkLine],
    x_max: f64,
) -> PlotResult<Vec<Plot>> {
    let Some(gpu) = &data.gpu else {
        return Ok(Vec::new());
    };
    let mut indices: Vec<u32> = gpu.rows.iter().map(|r| r.gpu_index).collect();
    indices.sort_unstable();
    indices.dedup();
    let mut plots = Vec::new();
    for (slot, &column) in gpu.columns.iter().enumerate() {
        let (name, title, unit) = GPU_COLUMNS[column];
        let unit = match unit {
            "%" => Unit::Percent,
            "bytes" => Unit::Bytes,
            "W" => Unit::Watts,
            _ => Unit::Count,
        };
        let series: Vec<Series> = indices
            .iter()
            .map(|&index| Series {
                name: format!("GPU {index}"),
                group: Some(index as usize),
                points: gpu
                    .rows
                    .iter()
                    .filter(|r| r.gpu_index == index)
                    .filter_map(|r| r.values[slot].map(|v| (model.secs(r.time_ns), v)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let hlines: Vec<(f64, String)> = match (name, gpu.memory_total_bytes) {
            ("memory_used_bytes", Some(total)) => {
                vec![(total, format!("GPU memory {}", format_bytes(total as u64)))]
            }
            _ => Vec::new(),
        };
        plots.push(Plot {
            id: format!("gpu-{}", name.replace('_', "-")),
            title: title.into(),
            caption: format!(
                "{title} per GPU (gpu.parquet `{name}`), the whole device: other programs on the \
                 GPU count too."
            ),
            svg: line_chart(title, unit, &series, marks, x_max, &hlines)?,
        });
    }
    Ok(plots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_bytes_are_two_bars_per_group_and_absent_without_them() {
        use crate::analysis::report::load::Process;
        use crate::analysis::report::model::{build, GroupBy};
        let process = |pid: u32, comm: &str, bytes: Option<SocketBytes>| Process {
            pid,
            start_ns: i64::from(pid),
            end_ns: Some(100),
            comm: comm.into(),
            socket_bytes: bytes,
            ..Default::default()
        };
        let bytes = |inet_sent, inet_received, unix_sent, unix_received| {
            Some(SocketBytes {
                inet_sent,
                inet_received,
                unix_sent,
                unix_received,
            })
        };
        let mut data = RunData {
            processes: vec![process(1, "sh", None), process(2, "make", None)],
            ..Default::default()
        };
        let model = build(&data, &GroupBy::Comm);
        assert_eq!(network(&data, &model).unwrap(), None, "no net_* figures");
        // Figures, all zero: nothing went through a socket.
        data.processes[0].socket_bytes = bytes(0, 0, 0, 0);
        let model = build(&data, &GroupBy::Comm);
        assert_eq!(network(&data, &model).unwrap(), None);

        // Two curls and a dbus client, and ten small groups of one process each.
        data.processes
            .push(process(3, "curl", bytes(1_000, 3 << 20, 0, 0)));
        data.processes
            .push(process(4, "curl", bytes(24, 1 << 20, 0, 100)));
        data.processes
            .push(process(5, "dbus", bytes(0, 0, 2048, 4096)));
        for k in 0..10 {
            data.processes
                .push(process(10 + k, &format!("tool{k}"), bytes(1, 1, 0, 0)));
        }
        let model = build(&data, &GroupBy::Comm);
        let per_group = model::socket_bytes_per_group(&data, &model);
        let curl = model.groups.iter().position(|g| g.name == "curl").unwrap();
        assert_eq!(per_group[curl], bytes(1_024, 4 << 20, 0, 100));
        let make = model.groups.iter().position(|g| g.name == "make").unwrap();
        assert_eq!(per_group[make], None);

        let plot = network(&data, &model).unwrap().expect("socket bytes");
        assert_eq!(plot.id, "network");
        for label in ["curl sent", "curl received", "dbus sent", "dbus received"] {
            assert!(
                plot.svg.contains(&format!(">\n{label}\n</text>")),
                "{label}"
            );
        }
        // Eight groups with bytes by name (curl, dbus, six tools), the other four summed (sh
        // has figures, but all zero: not a bar).
        assert!(plot.svg.contains(">\nother (4 groups) sent\n</text>"));
        assert!(!plot.svg.contains(">\nsh sent\n</text>"));
        assert!(!plot.svg.contains(">\nmake sent\n</text>"));
        assert!(
            plot.caption.contains(
                "In all: 1.0 KiB sent and 4.0 MiB received over IPv4/IPv6, 2.0 KiB sent and \
                 4.1 KiB received over unix sockets."
            ),
            "{}",
            plot.caption
        );
    }

    /// A 100 MiB Python and its vfork child before the exec (same group, the parent's memory
    /// in its samples too), then a 10 MiB /bin/true after the exec: the stacked plot's peak is
    /// system.parquet's tree figure, each memory image once, not the 200 MiB the samples sum
    /// to; a run without that column keeps the samples' sum.
    #[test]
    fn the_stacked_memory_is_the_trees_figure_counted_once() {
        use crate::analysis::report::load::{Process, Sample, SystemRow};
        use crate::analysis::report::model::{build, GroupBy};
        const S: i64 = 1_000_000_000;
        const MIB: u64 = 1 << 20;
        let process = |pid: u32, comm: &str| Process {
            pid,
            start_ns: i64::from(pid),
            end_ns: Some(4 * S),
            comm: comm.into(),
            ..Default::default()
        };
        let sample = |t: i64, process: usize, uss: u64| Sample {
            time_ns: t * S,
            process,
            rss_bytes: Some(uss),
            uss_bytes: Some(uss),
            ..Default::default()
        };
        let mut data = RunData {
            processes: vec![
                process(1, "python"),
                process(2, "python"),
                process(3, "true"),
            ],
            samples: vec![
                sample(1, 0, 100 * MIB),
                sample(2, 0, 100 * MIB),
                sample(2, 1, 100 * MIB),
                sample(3, 0, 100 * MIB),
                sample(3, 2, 10 * MIB),
            ],
            ..Default::default()
        };
        let caption = |data: &RunData| {
            let model = build(data, &GroupBy::Comm);
            let plots = all(data, &model).unwrap();
            let plot = plots.iter().find(|p| p.id == "memory-stacked").unwrap();
            plot.caption.clone()
        };
        let summed = caption(&data);
        assert!(summed.contains("peak (200.0 MiB at "), "{summed}");
        assert!(!summed.contains("counted once"), "{summed}");
        data.system = [(1, 100), (2, 100), (3, 110)]
            .map(|(t, mib)| SystemRow {
                time_ns: t * S,
                tree_uss_bytes: Some(mib * MIB),
                ..Default::default()
            })
            .to_vec();
        let once = caption(&data);
        assert!(once.contains("peak (110.0 MiB at "), "{once}");
        assert!(once.contains("each memory image counted once"), "{once}");
    }

    #[test]
    fn storage_reads_and_writes_are_plotted_as_rates_when_there_are_any() {
        use crate::analysis::report::load::{Process, Sample};
        use crate::analysis::report::model::{build, GroupBy};
        const S: i64 = 1_000_000_000;
        let sample = |t: i64, read: u64| Sample {
            time_ns: t * S,
            process: 0,
            read_bytes: Some(read),
            write_bytes: Some(0),
            rss_bytes: Some(1 << 20),
            ..Default::default()
        };
        let data = RunData {
            processes: vec![Process {
                pid: 1,
                comm: "dd".into(),
                end_ns: Some(4 * S),
                ..Default::default()
            }],
            // 50 MiB/s, then 100 MiB/s.
            samples: vec![sample(1, 50 << 20), sample(2, 150 << 20)],
            ..Default::default()
        };
        let model = build(&data, &GroupBy::Comm);
        let plots = all(&data, &model).unwrap();
        let ids: Vec<&str> = plots.iter().map(|p| p.id.as_str()).collect();
        assert!(ids.contains(&"io-read"), "{ids:?}");
        assert!(!ids.contains(&"io-write"), "nothing written: {ids:?}");
        let read = plots.iter().find(|p| p.id == "io-read").unwrap();
        assert!(read.svg.contains(" MiB/s\n</text>"), "a rate axis");
        assert!(read.svg.contains(">\n100 MiB/s\n</text>"));
        // The fixture's counters are all 0: no I/O plot.
        let fixture =
            crate::analysis::report::prepare(&crate::analysis::report::tests::fixture(), "exe")
                .unwrap();
        assert!(!fixture.plots.iter().any(|p| p.id.starts_with("io-")));
    }

    #[test]
    fn gpu_tables_add_their_plots() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        crate::analysis::report::synthetic_run(
            run,
            20,
            std::time::Duration::from_secs(4),
            std::time::Duration::from_millis(200),
        )
        .unwrap();
        crate::analysis::report::synthetic::add_synthetic_gpu(
            run,
            std::time::Duration::from_secs(4),
            std::time::Duration::from_millis(200),
            2,
        )
        .unwrap();
        let report = crate::analysis::report::prepare(run, "exe").unwrap();
        let ids: Vec<&str> = report.plots.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids[ids.len() - 3..],
            [
                "gpu-utilization-gpu-percent",
                "gpu-memory-used-bytes",
                "gpu-power-watts"
            ]
        );
        let memory = &report.plots[ids.len() - 2].svg;
        assert!(
            memory.contains("GPU memory 80.0 GiB"),
            "the device's memory is a line"
        );
        assert!(memory.contains("\nGPU 1\n"), "one line per GPU");
    }

    #[test]
    fn without_uss_memory_is_plotted_as_rss() {
        let fixture = crate::analysis::report::tests::fixture();
        let mut data = crate::analysis::report::load::load(&fixture).unwrap();
        for s in &mut data.samples {
            s.uss_bytes = None;
            s.pss_bytes = None;
        }
        let report = crate::analysis::report::prepare_data(data, model::GroupBy::Exe);
        let ids: Vec<&str> = report.plots.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["rss", "cpu", "cpu-time", "instances"]);
    }

    #[test]
    fn axis_labels_pick_a_unit() {
        let (div, suffix) = scale(Unit::Bytes, 3.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(div, 1024.0 * 1024.0 * 1024.0);
        assert_eq!(axis_label(1.5, suffix), "1.5 GiB");
        let (div, suffix) = scale(Unit::Bytes, 500.0);
        assert_eq!((div, axis_label(200.0, suffix).as_str()), (1.0, "200 B"));
        assert_eq!(axis_label(150.0, "%"), "150%");
    }

    #[test]
    fn a_line_chart_is_an_svg_with_a_legend_and_marks() {
        let series = vec![
            Series {
                name: "cc1".into(),
                group: Some(0),
                points: (0..5000)
                    .map(|i| (i as f64 * 0.1, (i % 7) as f64))
                    .collect(),
            },
            Series {
                name: "other (3 groups)".into(),
                group: None,
                points: vec![(0.0, 1.0), (500.0, 2.0)],
            },
        ];
        let svg = line_chart(
            "CPU <per> group",
            Unit::Percent,
            &series,
            &[(100.0, "build".into())],
            500.0,
            &[(5.0, "limit".into())],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        assert!(svg.contains("CPU &lt;per&gt; group"));
        // plotters writes text elements as `<text ...>\nTEXT\n</text>`.
        for text in ["cc1", "other (3 groups)", "build", "limit"] {
            assert!(svg.contains(&format!(">\n{text}\n</text>")), "{text}");
        }
        // 5,000 points were downsampled to at most two per bucket.
        let longest = svg
            .split("points=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().split(' ').count())
            .max()
            .unwrap();
        assert!(longest <= 2 * BUCKETS + 3, "{longest}");
    }
}
