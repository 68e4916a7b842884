//! The process-tree timeline: every process a bar from its start to its end, under its parent,
//! coloured by group, with its figures in the bar's tooltip (an SVG `<title>`, which browsers
//! show on hover without any script). The steps of the critical path (run.json
//! `time.critical_path`) are outlined, and the axis's legend says so.
//!
//! Identical siblings fold: [`FOLD_MIN`] or more children of one parent with the same command
//! line and no children of their own (200 `true` from a shell loop) are one row, "200 × true",
//! that the HTML report opens (`<details>`) to show each of them.
//!
//! Large runs stay readable (see [`Limits`]): above `full` processes, siblings of the same group
//! are merged into one row ("cc1 ×300") whose children are the children of all of them, merged
//! the same way; each member still shows as a tick inside the row's span. When even the merged
//! tree has more than `max_rows` rows, the deepest levels are folded into their ancestors (the
//! row says how many processes are below it); when that leaves less than a quarter of
//! `max_rows`, one more level is shown, and the list is cut where the rows run out.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::load::RunData;
use super::model::{exit_text, Model};
use super::{color_hex, fmt_secs, xml_escape};
use crate::units::format_bytes;

/// When to merge and when to cut.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Up to this many processes, one row per process.
    pub full: usize,
    /// The most rows drawn.
    pub max_rows: usize,
    /// The most member ticks drawn inside merged rows, over the whole timeline.
    pub max_ticks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            full: 300,
            max_rows: 400,
            max_ticks: 20_000,
        }
    }
}

/// Identical siblings folded into one row at least this many.
pub const FOLD_MIN: usize = 5;

/// One row: one process, siblings of one group merged, or identical siblings folded.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub depth: usize,
    pub group: usize,
    /// The processes of the row (indices into `RunData::processes`), by start time.
    pub members: Vec<usize>,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Processes below this row that no row shows (its levels were folded).
    pub hidden: usize,
    /// Its members are identical siblings folded (see [`FOLD_MIN`]): the HTML report opens the
    /// row to show each of them.
    pub folded: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub rows: Vec<Row>,
    /// Siblings were merged.
    pub merged: bool,
    /// Levels below this depth were folded (None: all shown).
    pub folded_below: Option<usize>,
    /// Rows cut at the end, and the processes in them.
    pub cut_rows: usize,
    pub cut_processes: usize,
}

struct Node {
    members: Vec<usize>,
    folded: bool,
    depth: usize,
    children: Vec<usize>,
    /// Processes in the subtree, members included.
    subtree: usize,
}

/// How deep the rows go: the deepest levels are folded until the rows fit. Returns (the deepest
/// level shown, the deepest level there is).
fn fold_depth(nodes: &[Node], limits: Limits) -> (usize, usize) {
    let max_depth = nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    let mut per_depth = vec![0usize; max_depth + 1];
    for node in nodes {
        per_depth[node.depth] += 1;
    }
    let mut shown_depth = max_depth;
    let mut rows_up_to: usize = per_depth.iter().sum();
    while shown_depth > 0 && rows_up_to > limits.max_rows {
        rows_up_to -= per_depth[shown_depth];
        shown_depth -= 1;
    }
    // Folding left too little to see (one huge level below, e.g. thousands of distinct groups):
    // show that level too, as far as it fits, and cut the rest.
    if shown_depth < max_depth && rows_up_to < limits.max_rows / 4 {
        shown_depth += 1;
    }
    (shown_depth, max_depth)
}

/// Lays the tree out into rows (pure; see the module's rules).
pub fn layout(data: &RunData, model: &Model, limits: Limits) -> Timeline {
    let n = data.processes.len();
    let merge = n > limits.full;
    let key = |i: usize| (data.processes[i].start_ns, data.processes[i].pid);
    let (children, roots) = data.children_and_roots();

    // The (merged) tree, breadth first: a node's children come after it. Each node is its
    // members and whether they are folded.
    let group_into_nodes = |procs: Vec<usize>| -> Vec<(Vec<usize>, bool)> {
        if !merge {
            return fold_identical(data, &children, procs);
        }
        let mut nodes: Vec<Vec<usize>> = Vec::new();
        let mut slot: HashMap<usize, usize> = HashMap::new();
        for p in procs {
            let g = model.group_of[p];
            let k = *slot.entry(g).or_insert_with(|| {
                nodes.push(Vec::new());
                nodes.len() - 1
            });
            nodes[k].push(p);
        }
        nodes.into_iter().map(|m| (m, false)).collect()
    };
    let mut nodes: Vec<Node> = Vec::new();
    let mut top = Vec::new();
    for (members, folded) in group_into_nodes(roots) {
        top.push(nodes.len());
        nodes.push(Node {
            members,
            folded,
            depth: 0,
            children: Vec::new(),
            subtree: 0,
        });
    }
    let mut next = 0;
    while next < nodes.len() {
        let mut kids: Vec<usize> = nodes[next]
            .members
            .iter()
            .flat_map(|&m| children[m].iter().copied())
            .collect();
        kids.sort_by_key(|&i| key(i));
        let depth = nodes[next].depth + 1;
        for (members, folded) in group_into_nodes(kids) {
            let id = nodes.len();
            nodes[next].children.push(id);
            nodes.push(Node {
                members,
                folded,
                depth,
                children: Vec::new(),
                subtree: 0,
            });
        }
        next += 1;
    }
    for id in (0..nodes.len()).rev() {
        let below: usize = nodes[id].children.iter().map(|&c| nodes[c].subtree).sum();
        nodes[id].subtree = nodes[id].members.len() + below;
    }

    let (shown_depth, max_depth) = fold_depth(&nodes, limits);

    // Depth-first, in start order.
    let mut timeline = Timeline {
        merged: merge,
        folded_below: (shown_depth < max_depth).then_some(shown_depth),
        ..Default::default()
    };
    let mut stack: Vec<usize> = top.into_iter().rev().collect();
    while let Some(id) = stack.pop() {
        let node = &nodes[id];
        if timeline.rows.len() >= limits.max_rows {
            timeline.cut_rows += 1;
            timeline.cut_processes += node.members.len();
            if node.depth == shown_depth {
                timeline.cut_processes += node.subtree - node.members.len();
            }
        } else {
            let first = node.members[0];
            let start_ns = node
                .members
                .iter()
                .map(|&m| data.processes[m].start_ns)
                .min()
                .unwrap_or(0);
            let end_ns = node
                .members
                .iter()
                .map(|&m| model.end_of(&data.processes[m]))
                .max()
                .unwrap_or(start_ns);
            timeline.rows.push(Row {
                depth: node.depth,
                group: model.group_of[first],
                members: node.members.clone(),
                start_ns,
                end_ns,
                hidden: if node.depth == shown_depth {
                    node.subtree - node.members.len()
                } else {
                    0
                },
                folded: node.folded,
            });
        }
        if node.depth < shown_depth {
            stack.extend(node.children.iter().rev());
        }
    }
    timeline
}

/// Siblings (in start order) as rows: one process each, except that [`FOLD_MIN`] or more with
/// the same command line and no children of their own fold into one, where the first of them
/// starts.
fn fold_identical(
    data: &RunData,
    children: &[Vec<usize>],
    siblings: Vec<usize>,
) -> Vec<(Vec<usize>, bool)> {
    // The command line of each leaf (the only siblings that fold), read once.
    let lines: Vec<Option<String>> = siblings
        .iter()
        .map(|&p| {
            children[p]
                .is_empty()
                .then(|| data.processes[p].command_line())
        })
        .collect();
    let mut alike: HashMap<&str, Vec<usize>> = HashMap::new();
    for (&p, line) in siblings.iter().zip(&lines) {
        if let Some(line) = line {
            alike.entry(line).or_default().push(p);
        }
    }
    alike.retain(|_, same| same.len() >= FOLD_MIN);
    let mut nodes = Vec::new();
    for (&p, line) in siblings.iter().zip(&lines) {
        match line.as_deref().and_then(|line| alike.get(line)) {
            // The first of them takes them all; the others are in its row already.
            Some(same) if same[0] == p => nodes.push((same.clone(), true)),
            Some(_) => {}
            None => nodes.push((vec![p], false)),
        }
    }
    nodes
}

const WIDTH: f64 = 1200.0;
const LABEL_WIDTH: f64 = 300.0;
const RIGHT: f64 = 16.0;
const AXIS: f64 = 34.0;
const ROW: f64 = 16.0;
const BAR: f64 = 11.0;
/// The outline of a bar on the critical path: dark, so it stands out on every group colour.
const CRITICAL_STROKE: &str = r##" stroke="#111" stroke-width="1.8""##;

/// A "nice" step (1, 2 or 5 × 10^k) giving about `target` ticks over `span`.
pub fn tick_step(span: f64, target: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude);
    step.max(1e-6)
}

/// The time axis (labels, and grid lines down to `bottom`), on top of the timeline, with the
/// legend of the critical path's outline when the run has one.
fn axis(out: &mut String, model: &Model, span_s: f64, bottom: f64) {
    grid(out, span_s, AXIS - 4.0, bottom, true);
    let _ = write!(
        out,
        r##"<text x="4" y="{:.1}" fill="#444">process (pid) · time since start (s)</text>"##,
        AXIS - 8.0
    );
    if model.on_critical_path.contains(&true) {
        // Above the tick labels, at the right.
        let x = WIDTH - RIGHT - 130.0;
        let _ = write!(
            out,
            r##"<g><rect x="{x:.1}" y="3" width="18" height="{BAR}" rx="2" fill="white"{CRITICAL_STROKE}/><text x="{:.1}" y="12" fill="#222">{CRITICAL_LEGEND}</text></g>"##,
            x + 24.0
        );
    }
}

/// The grid's vertical lines from `top` to `bottom`, with the time of each above it when
/// `labels`.
fn grid(out: &mut String, span_s: f64, top: f64, bottom: f64, labels: bool) {
    let plot_w = WIDTH - LABEL_WIDTH - RIGHT;
    let step = tick_step(span_s, 10.0);
    let mut t = 0.0;
    while t <= span_s * 1.0001 {
        let px = LABEL_WIDTH + t / span_s * plot_w;
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{top:.1}" x2="{px:.1}" y2="{bottom:.1}" stroke="#d0d4d9" stroke-width="0.5"/>"##
        );
        if labels {
            let _ = write!(
                out,
                r##"<text x="{px:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
                top - 4.0,
                tick_label(t, step)
            );
        }
        t += step;
    }
}

/// The legend entry of the critical path's outline.
pub const CRITICAL_LEGEND: &str = "on the critical path";

/// The time axis alone, as wide as the timeline: the HTML report keeps it in view (sticky) while
/// the rows scroll under it.
pub fn axis_svg(model: &Model) -> String {
    let span_s = model.secs(model.t1_ns).max(1e-3);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{AXIS}" viewBox="0 0 {WIDTH} {AXIS}" font-family="sans-serif" font-size="11" aria-hidden="true"><rect width="100%" height="100%" fill="white"/>"#
    );
    axis(&mut out, model, span_s, AXIS);
    out.push_str("</svg>");
    out
}

/// The timeline as an SVG document (no script; tooltips are `<title>` elements), with its axis:
/// the Markdown report's `report-timeline.svg`. Folded rows stay closed.
pub fn svg(data: &RunData, model: &Model, timeline: &Timeline, limits: Limits) -> String {
    let mut ticks_left = limits.max_ticks;
    let cut = (timeline.cut_rows > 0).then_some((timeline.cut_rows, timeline.cut_processes));
    strip(
        data,
        model,
        Strip {
            rows: &timeline.rows,
            first: 0,
            axis: true,
            mark_labels: true,
            cut,
            openable: false,
        },
        &mut ticks_left,
    )
}

/// The timeline for the HTML page, under the axis it keeps in view ([`axis_svg`]): strips of
/// rows, one SVG each, and each folded row a `<details>` whose summary is its row and which
/// opens to a row per member.
pub fn html(data: &RunData, model: &Model, timeline: &Timeline, limits: Limits) -> String {
    let mut ticks_left = limits.max_ticks;
    let rows = &timeline.rows;
    let mut out = String::new();
    let mut i = 0;
    while i < rows.len() {
        let first = i == 0;
        if rows[i].folded {
            let row = &rows[i];
            let members: Vec<Row> = row
                .members
                .iter()
                .map(|&m| Row {
                    members: vec![m],
                    start_ns: data.processes[m].start_ns,
                    end_ns: model.end_of(&data.processes[m]),
                    folded: false,
                    hidden: 0,
                    ..row.clone()
                })
                .collect();
            let one = |rows: &[Row], first_row: usize, mark_labels: bool, ticks: &mut usize| {
                strip(
                    data,
                    model,
                    Strip {
                        rows,
                        first: first_row,
                        axis: false,
                        mark_labels,
                        cut: None,
                        openable: true,
                    },
                    ticks,
                )
            };
            out.push_str(r#"<details class="fold"><summary>"#);
            out.push_str(&one(std::slice::from_ref(row), i, first, &mut ticks_left));
            out.push_str("</summary>");
            out.push_str(&one(&members, i + 1, false, &mut ticks_left));
            out.push_str("</details>");
            i += 1;
        } else {
            let end = rows[i..]
                .iter()
                .position(|r| r.folded)
                .map_or(rows.len(), |k| i + k);
            out.push_str(&strip(
                data,
                model,
                Strip {
                    rows: &rows[i..end],
                    first: i,
                    axis: false,
                    mark_labels: first,
                    cut: None,
                    openable: true,
                },
                &mut ticks_left,
            ));
            i = end;
        }
    }
    if timeline.cut_rows > 0 {
        out.push_str(&strip(
            data,
            model,
            Strip {
                rows: &[],
                first: rows.len(),
                axis: false,
                mark_labels: false,
                cut: Some((timeline.cut_rows, timeline.cut_processes)),
                openable: true,
            },
            &mut ticks_left,
        ));
    }
    out
}

/// Rows drawn in one SVG, and what else it has.
struct Strip<'a> {
    rows: &'a [Row],
    /// The index of its first row in the whole timeline (for the stripes).
    first: usize,
    /// The time axis on top.
    axis: bool,
    /// The marks' labels (their lines are in every strip).
    mark_labels: bool,
    /// A last line saying how many rows and processes were cut.
    cut: Option<(usize, usize)>,
    /// In the HTML page: folded rows show whether they are open.
    openable: bool,
}

fn strip(data: &RunData, model: &Model, strip: Strip<'_>, ticks_left: &mut usize) -> String {
    let span_s = model.secs(model.t1_ns).max(1e-3);
    let plot_w = WIDTH - LABEL_WIDTH - RIGHT;
    let x = |t_ns: i64| LABEL_WIDTH + (model.secs(t_ns) / span_s).clamp(0.0, 1.0) * plot_w;
    let rows = strip.rows.len();
    let top = if strip.axis { AXIS } else { 0.0 };
    let footer = if strip.cut.is_some() { ROW } else { 0.0 };
    let margin = if strip.axis { 6.0 } else { 0.0 };
    let height = top + rows as f64 * ROW + footer + margin;
    let mut out = String::with_capacity(256 * rows + 64);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11" role="img" aria-label="process tree timeline">"#
    );
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    // Stripes, then the time axis and grid.
    for r in (0..rows).filter(|r| (strip.first + r) % 2 == 1) {
        let _ = write!(
            out,
            r##"<rect x="0" y="{:.1}" width="{WIDTH}" height="{ROW}" fill="#f4f6f8"/>"##,
            top + r as f64 * ROW
        );
    }
    let bottom = top + rows as f64 * ROW;
    if strip.axis {
        axis(&mut out, model, span_s, bottom);
    } else {
        grid(&mut out, span_s, top, bottom, false);
    }
    // Rows.
    for (r, row) in strip.rows.iter().enumerate() {
        let y = top + r as f64 * ROW;
        let color = color_hex(Some(row.group));
        let x0 = x(row.start_ns);
        let x1 = x(row.end_ns).max(x0 + 1.0);
        let by = y + (ROW - BAR) / 2.0;
        out.push_str("<g><title>");
        out.push_str(&xml_escape(&tooltip(data, model, row)));
        out.push_str("</title>");
        if row.members.len() == 1 {
            let outline = if critical(model, row.members[0]) {
                CRITICAL_STROKE
            } else {
                ""
            };
            let _ = write!(
                out,
                r#"<rect x="{x0:.1}" y="{by:.1}" width="{:.1}" height="{BAR}" rx="2" fill="{color}"{outline}/>"#,
                x1 - x0
            );
        } else {
            let _ = write!(
                out,
                r#"<rect x="{x0:.1}" y="{by:.1}" width="{:.1}" height="{BAR}" rx="2" fill="{color}" fill-opacity="0.25"/>"#,
                x1 - x0
            );
            if *ticks_left >= row.members.len() {
                *ticks_left -= row.members.len();
                let _ = write!(out, r#"<g fill="{color}" fill-opacity="0.8">"#);
                for &m in &row.members {
                    let p = &data.processes[m];
                    let a = x(p.start_ns);
                    let b = x(model.end_of(p)).max(a + 0.8);
                    let outline = if critical(model, m) {
                        CRITICAL_STROKE
                    } else {
                        ""
                    };
                    let _ = write!(
                        out,
                        r#"<rect x="{a:.1}" y="{by:.1}" width="{:.1}" height="{BAR}"{outline}/>"#,
                        b - a
                    );
                }
                out.push_str("</g>");
            } else if row.members.iter().any(|&m| critical(model, m)) {
                // No ticks drawn: the row's span carries the outline.
                let _ = write!(
                    out,
                    r#"<rect x="{x0:.1}" y="{by:.1}" width="{:.1}" height="{BAR}" rx="2" fill="none"{CRITICAL_STROKE}/>"#,
                    x1 - x0
                );
            }
        }
        let indent = (row.depth as f64 * 12.0).min(LABEL_WIDTH / 2.0);
        let max_chars = ((LABEL_WIDTH - indent - 10.0) / 6.2).max(4.0) as usize;
        let _ = write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" fill="#222">"##,
            4.0 + indent,
            y + ROW - 4.0,
        );
        let mut label_chars = max_chars;
        if strip.openable && row.folded {
            // The page's style shows the one that says what a click does.
            out.push_str(
                r#"<tspan class="fold-closed">▸ </tspan><tspan class="fold-open">▾ </tspan>"#,
            );
            label_chars = label_chars.saturating_sub(2).max(4);
        }
        let _ = write!(
            out,
            "{}</text></g>",
            xml_escape(&truncate(&row_label(data, model, row), label_chars))
        );
    }
    mark_lines(&mut out, data, &x, (top, bottom), strip.mark_labels);
    if let Some((cut_rows, cut_processes)) = strip.cut {
        let _ = write!(
            out,
            r##"<text x="4" y="{:.1}" fill="#a00">… {cut_rows} more rows ({cut_processes} processes) not drawn</text>"##,
            bottom + ROW - 4.0,
        );
    }
    out.push_str("</svg>");
    out
}

/// The marks' lines from `top` to `bottom` (each with its text as tooltip), and their labels when
/// `labels`; `x` places a time.
fn mark_lines(
    out: &mut String,
    data: &RunData,
    x: &dyn Fn(i64) -> f64,
    (top, bottom): (f64, f64),
    labels: bool,
) {
    let plot_w = WIDTH - LABEL_WIDTH - RIGHT;
    for (k, mark) in super::drawn_marks(&data.marks).into_iter().enumerate() {
        let px = x(mark.time_ns);
        let right_side = px > LABEL_WIDTH + 0.8 * plot_w;
        let _ = write!(
            out,
            r##"<g><title>{}</title><line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{bottom:.1}" stroke="#c0392b" stroke-width="1" stroke-dasharray="4 3"/>"##,
            xml_escape(&super::mark_text(mark)),
        );
        if labels {
            let _ = write!(
                out,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="{}" fill="#c0392b">{}</text>"##,
                // Left of the line near the right edge, so the label stays inside.
                if right_side { px - 2.0 } else { px + 2.0 },
                // Staggered, so marks close together keep readable labels.
                top + 10.0 + 11.0 * (k % 3) as f64,
                if right_side { "end" } else { "start" },
                xml_escape(&truncate(&super::mark_text(mark), 30))
            );
        }
        out.push_str("</g>");
    }
}

fn critical(model: &Model, process: usize) -> bool {
    model
        .on_critical_path
        .get(process)
        .copied()
        .unwrap_or(false)
}

fn tick_label(t: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{t:.decimals$}")
}

fn truncate(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max_chars.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// The text left of a row's bar.
pub fn row_label(data: &RunData, model: &Model, row: &Row) -> String {
    let group = &model.groups[row.group].name;
    let mut label = if row.members.len() == 1 {
        format!("{group} {}", data.processes[row.members[0]].pid)
    } else if row.folded {
        format!(
            "{} × {}",
            row.members.len(),
            data.processes[row.members[0]].command_line()
        )
    } else {
        format!("{group} ×{}", row.members.len())
    };
    if row.hidden > 0 {
        let _ = write!(label, " (+{} below)", row.hidden);
    }
    label
}

/// What hovering a row shows.
pub fn tooltip(data: &RunData, model: &Model, row: &Row) -> String {
    let group = &model.groups[row.group].name;
    let mut text = String::new();
    if let [only] = row.members[..] {
        let p = &data.processes[only];
        let ps = &model.procs[only];
        let _ = writeln!(
            text,
            "{group}: pid {}{}",
            p.pid,
            p.parent
                .map_or(String::new(), |(ppid, _)| format!(", parent {ppid}"))
        );
        let _ = writeln!(text, "{}", truncate(&p.command_line(), 300));
        let _ = writeln!(
            text,
            "+{} → +{} ({}{})",
            fmt_secs(model.secs(p.start_ns)),
            fmt_secs(model.secs(model.end_of(p))),
            fmt_secs((model.end_of(p) - p.start_ns) as f64 / 1e9),
            if p.end_ns.is_none() {
                ", still running"
            } else {
                ""
            }
        );
        let _ = writeln!(
            text,
            "CPU {} (user {}, system {}){}",
            fmt_secs((ps.cpu_user_ns + ps.cpu_system_ns) as f64 / 1e9),
            fmt_secs(ps.cpu_user_ns as f64 / 1e9),
            fmt_secs(ps.cpu_system_ns as f64 / 1e9),
            if ps.cpu_from_samples {
                ", from its last sample"
            } else {
                ""
            }
        );
        let _ = writeln!(
            text,
            "peak RSS {}, peak USS {}",
            ps.peak_rss.map_or("n/a".into(), format_bytes),
            ps.peak_uss.map_or("n/a".into(), format_bytes)
        );
        text.push_str(&exit_text(p));
        if critical(model, only) {
            let _ = write!(text, "\n{CRITICAL_LEGEND}");
        }
    } else {
        if row.folded {
            let _ = writeln!(
                text,
                "{} × {} (identical siblings, folded)",
                row.members.len(),
                truncate(&data.processes[row.members[0]].command_line(), 300)
            );
        } else {
            let _ = writeln!(text, "{group} ×{} (merged siblings)", row.members.len());
        }
        let _ = writeln!(
            text,
            "+{} → +{}",
            fmt_secs(model.secs(row.start_ns)),
            fmt_secs(model.secs(row.end_ns))
        );
        let cpu: u64 = row
            .members
            .iter()
            .map(|&m| model.procs[m].cpu_user_ns + model.procs[m].cpu_system_ns)
            .sum();
        let peak = row
            .members
            .iter()
            .filter_map(|&m| model.procs[m].peak_rss)
            .max();
        let _ = writeln!(
            text,
            "CPU {} in all; largest peak RSS {}",
            fmt_secs(cpu as f64 / 1e9),
            peak.map_or("n/a".into(), format_bytes)
        );
        let mut exits: Vec<(String, usize)> = Vec::new();
        for &m in &row.members {
            let e = exit_text(&data.processes[m]);
            match exits.iter_mut().find(|(t, _)| *t == e) {
                Some((_, c)) => *c += 1,
                None => exits.push((e, 1)),
            }
        }
        let exits: Vec<String> = exits.iter().map(|(e, c)| format!("{c} × {e}")).collect();
        let _ = write!(text, "{}", exits.join(", "));
        let on_path = row.members.iter().filter(|&&m| critical(model, m)).count();
        if on_path > 0 {
            let _ = write!(text, "\n{on_path} of them {CRITICAL_LEGEND}");
        }
    }
    if row.hidden > 0 {
        let _ = write!(text, "\n{} processes below, folded", row.hidden);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::report::load::Process;
    use crate::analysis::report::model::{build, GroupBy};

    const S: i64 = 1_000_000_000;

    fn p(pid: u32, parent: Option<u32>, exe: &str, start_s: i64, end_s: i64) -> Process {
        Process {
            pid,
            start_ns: start_s * S + i64::from(pid),
            parent: parent.map(|pp| (pp, 0)),
            end_ns: Some(end_s * S),
            filename: Some(format!("/bin/{exe}")),
            comm: exe.into(),
            exit_code: Some(0),
            ..Default::default()
        }
    }

    /// make -> 40 × (sh -> cc1, as), and one `true` at the top level.
    fn build_tree() -> RunData {
        let mut procs = vec![p(1, None, "make", 0, 100)];
        let mut pid = 2;
        for j in 0..40 {
            procs.push(p(pid, Some(1), "sh", j, j + 2));
            let sh = pid;
            procs.push(p(pid + 1, Some(sh), "cc1", j, j + 1));
            procs.push(p(pid + 2, Some(sh), "as", j + 1, j + 2));
            pid += 3;
        }
        procs.push(p(pid, Some(1), "true", 50, 51));
        // Parents are referred to by (pid, start time).
        let starts: HashMap<u32, i64> = procs.iter().map(|p| (p.pid, p.start_ns)).collect();
        for proc in &mut procs {
            proc.parent = proc.parent.map(|(pp, _)| (pp, starts[&pp]));
        }
        RunData {
            processes: procs,
            ..Default::default()
        }
    }

    fn labels(data: &RunData, model: &Model, t: &Timeline) -> Vec<String> {
        t.rows
            .iter()
            .map(|r| format!("{}{}", "  ".repeat(r.depth), row_label(data, model, r)))
            .collect()
    }

    #[test]
    fn small_trees_have_one_row_per_process_nested_by_lineage() {
        let data = build_tree();
        let model = build(&data, &GroupBy::Exe);
        let t = layout(&data, &model, Limits::default());
        assert!(!t.merged);
        assert_eq!(t.rows.len(), data.processes.len());
        let l = labels(&data, &model, &t);
        assert_eq!(&l[..4], ["make 1", "  sh 2", "    cc1 3", "    as 4"]);
        assert_eq!(l.last().unwrap(), "  true 122");
        assert!(l.contains(&"  sh 119".to_string()));
    }

    #[test]
    fn many_processes_merge_siblings_of_one_group() {
        let data = build_tree();
        let model = build(&data, &GroupBy::Exe);
        let limits = Limits {
            full: 50,
            ..Limits::default()
        };
        let t = layout(&data, &model, limits);
        assert!(t.merged);
        assert_eq!(
            labels(&data, &model, &t),
            [
                "make 1",
                "  sh ×40",
                "    cc1 ×40",
                "    as ×40",
                "  true 122"
            ]
        );
        let sh = &t.rows[1];
        assert_eq!((sh.start_ns / S, sh.end_ns / S), (0, 41));
        let tip = tooltip(&data, &model, sh);
        assert!(tip.starts_with("sh ×40 (merged siblings)\n"), "{tip}");
        assert!(tip.ends_with("40 × exit 0"), "{tip}");
        // Every member is drawn as a tick.
        let svg = svg(&data, &model, &t, limits);
        assert_eq!(svg.matches("<rect").count(), 3 * 40 + 5 + 2 + 1);
    }

    #[test]
    fn too_many_rows_fold_the_deepest_levels_then_cut() {
        let data = build_tree();
        let model = build(&data, &GroupBy::Exe);
        // Unmerged: 122 rows; at most 42 fit: make, 40 sh and true, with cc1 and as folded.
        let t = layout(
            &data,
            &model,
            Limits {
                max_rows: 42,
                ..Limits::default()
            },
        );
        assert_eq!(t.folded_below, Some(1));
        assert_eq!(t.rows.len(), 42);
        let l = labels(&data, &model, &t);
        assert_eq!(&l[..2], ["make 1", "  sh 2 (+2 below)"]);
        assert_eq!(t.cut_rows, 0);
        // 10 rows: folding down to `make` alone would leave one row, so the next level shows as
        // far as it fits and the rest is cut.
        let t = layout(
            &data,
            &model,
            Limits {
                max_rows: 10,
                ..Limits::default()
            },
        );
        assert_eq!(t.folded_below, Some(1));
        assert_eq!(t.rows.len(), 10);
        assert_eq!(labels(&data, &model, &t)[9], "  sh 26 (+2 below)");
        // 31 sh with their cc1 and as, and `true`.
        assert_eq!((t.cut_rows, t.cut_processes), (32, 31 * 3 + 1));
        let t = layout(
            &data,
            &model,
            Limits {
                max_rows: 0,
                ..Limits::default()
            },
        );
        assert_eq!((t.cut_rows, t.cut_processes), (1, 122));
    }

    #[test]
    fn orphans_and_reused_pids_are_roots() {
        let mut data = build_tree();
        // A parent that was never tracked, and one that "started after" its child.
        data.processes[5].parent = Some((999, 0));
        data.processes[8].parent = Some((data.processes[9].pid, data.processes[9].start_ns));
        let model = build(&data, &GroupBy::Exe);
        let t = layout(&data, &model, Limits::default());
        let shown: usize = t.rows.iter().map(|r| r.members.len()).sum();
        assert_eq!(shown, data.processes.len());
        assert_eq!(t.rows.iter().filter(|r| r.depth == 0).count(), 3);
    }

    /// build_tree with run.json whose critical path is make's first sh, its cc1 and its as,
    /// and a step that matches no process (pid 5 did not start then).
    fn with_critical_path() -> RunData {
        use crate::analysis::critical::{Step, TimeAnalysis};
        let mut data = build_tree();
        let mut info =
            crate::analysis::report::load::load(&crate::analysis::report::tests::fixture())
                .unwrap()
                .info
                .unwrap();
        let origin = data.processes[0].start_ns;
        let step = |pid: u32, start_ns: i64| Step::at(pid, (start_ns - origin) as f64 / 1e9, 1.0);
        let start = |pid: u32| data.processes[pid as usize - 1].start_ns;
        info.time = Some(TimeAnalysis {
            critical_path: vec![
                step(2, start(2)),
                step(3, start(3)),
                step(4, start(4)),
                step(5, start(5) + S),
            ],
            critical_path_steps: 4,
            ..Default::default()
        });
        data.info = Some(info);
        data
    }

    #[test]
    fn the_critical_path_is_outlined_with_a_legend() {
        let data = build_tree();
        let model = build(&data, &GroupBy::Exe);
        assert!(!model.on_critical_path.contains(&true), "no run.json time");
        let t = layout(&data, &model, Limits::default());
        let plain = svg(&data, &model, &t, Limits::default());
        assert!(!plain.contains(CRITICAL_STROKE));
        assert!(!plain.contains(CRITICAL_LEGEND));
        assert!(!axis_svg(&model).contains(CRITICAL_LEGEND));

        let data = with_critical_path();
        let model = build(&data, &GroupBy::Exe);
        let on: Vec<u32> = (0..data.processes.len())
            .filter(|&i| model.on_critical_path[i])
            .map(|i| data.processes[i].pid)
            .collect();
        assert_eq!(on, [2, 3, 4]);
        // One row each: their three bars and the legend's swatch, in the SVG file and in the
        // axis the HTML keeps in view.
        let t = layout(&data, &model, Limits::default());
        let drawn = svg(&data, &model, &t, Limits::default());
        assert_eq!(drawn.matches(CRITICAL_STROKE).count(), 3 + 1);
        assert!(drawn.contains(&format!(">{CRITICAL_LEGEND}</text>")));
        assert!(axis_svg(&model).contains(CRITICAL_LEGEND));
        let cc1 = t.rows.iter().find(|r| r.members == [2]).unwrap();
        assert!(tooltip(&data, &model, cc1).ends_with(&format!("\n{CRITICAL_LEGEND}")));
        let sh = t.rows.iter().find(|r| r.members == [4]).unwrap();
        assert!(!tooltip(&data, &model, sh).contains(CRITICAL_LEGEND));
        // Merged: the members' ticks carry the outline, and the rows say how many.
        let limits = Limits {
            full: 50,
            ..Limits::default()
        };
        let t = layout(&data, &model, limits);
        let drawn = svg(&data, &model, &t, limits);
        assert_eq!(drawn.matches(CRITICAL_STROKE).count(), 3 + 1);
        assert!(tooltip(&data, &model, &t.rows[1]).ends_with("\n1 of them on the critical path"));
        // Without room for ticks, the merged row's span is outlined instead.
        let limits = Limits {
            full: 50,
            max_ticks: 0,
            ..Limits::default()
        };
        let drawn = svg(&data, &model, &t, limits);
        assert_eq!(drawn.matches(CRITICAL_STROKE).count(), 3 + 1);
        assert!(drawn.contains(&format!(r#"fill="none"{CRITICAL_STROKE}"#)));
    }

    #[test]
    fn identical_leaf_siblings_fold_into_a_row_that_opens() {
        let mut data = build_tree();
        let make = (1, data.processes[0].start_ns);
        let mut pid = 200;
        let mut child = |exe: &str, argv: &[&str], parent: (u32, i64), start_s: i64| {
            pid += 1;
            Process {
                parent: Some(parent),
                argv: Some(argv.iter().map(|a| a.to_string()).collect()),
                ..p(pid, None, exe, start_s, start_s + 1)
            }
        };
        // Under make: 6 `true` (fold), 4 `false` (too few), and a 7th `true` with a child of
        // its own (its subtree is not identical: it keeps its row).
        let mut extra = Vec::new();
        for k in 0..6 {
            extra.push(child("true", &["true"], make, 60 + k));
        }
        for k in 0..4 {
            extra.push(child("false", &["false"], make, 70 + k));
        }
        let parent = child("true", &["true"], make, 80);
        let parent_key = (parent.pid, parent.start_ns);
        extra.push(parent);
        extra.push(child("sleep", &["sleep", "1"], parent_key, 80));
        data.processes.extend(extra);
        let model = build(&data, &GroupBy::Exe);
        let limits = Limits::default();
        let t = layout(&data, &model, limits);
        assert!(!t.merged);
        let l = labels(&data, &model, &t);
        assert_eq!(
            l[l.len() - 8..],
            [
                "  true 122",
                "  6 × true",
                "  false 207",
                "  false 208",
                "  false 209",
                "  false 210",
                "  true 211",
                "    sleep 212",
            ]
        );
        let fold = t.rows.iter().find(|r| r.folded).unwrap();
        assert_eq!(fold.members.len(), 6);
        assert_eq!((fold.start_ns / S, fold.end_ns / S), (60, 66));
        assert!(tooltip(&data, &model, fold).starts_with("6 × true (identical siblings, folded)\n"));
        assert_eq!(
            t.rows.iter().map(|r| r.members.len()).sum::<usize>(),
            data.processes.len()
        );
        // The SVG file: the row closed, with its count, and the members as its ticks.
        let file = svg(&data, &model, &t, limits);
        assert!(file.contains(">6 × true</text>"));
        assert!(!file.contains(">true 201</text>"));
        assert!(!file.contains("<details"));
        // The page: the row is the summary of a <details> that holds one row per member.
        let page = html(&data, &model, &t, limits);
        assert_eq!(page.matches("<details").count(), 1);
        let inside = &page[page.find("</summary>").unwrap()..page.find("</details>").unwrap()];
        for pid in 201..=206 {
            assert!(inside.contains(&format!(">true {pid}</text>")), "{pid}");
        }
        assert!(!inside.contains(">false 207</text>"));
        // Rows before and after the fold are in strips of their own, in order.
        assert_eq!(page.matches("<svg").count(), 2 + 2);
        let (before, after) = page.split_at(page.find("<details").unwrap());
        assert!(before.contains(">make 1</text>"));
        assert!(after.contains(">false 207</text>"));
        // Merged runs merge by group, and fold nothing.
        let merged = layout(&data, &model, Limits { full: 50, ..limits });
        assert!(merged.merged);
        assert!(!merged.rows.iter().any(|r| r.folded));
    }

    #[test]
    fn nice_ticks() {
        assert_eq!(tick_step(10.0, 10.0), 1.0);
        assert_eq!(tick_step(600.0, 10.0), 100.0);
        assert_eq!(tick_step(1.3, 10.0), 0.2);
        assert_eq!(tick_label(0.4, 0.2), "0.4");
    }
}
