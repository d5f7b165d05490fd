//! The printed table: one row per scenario, printed as it is measured and again at the end.

use crate::common::stats;
use crate::side_by_side;

/// One row of the printed table.
#[derive(Default)]
pub(crate) struct Row {
    pub(crate) scenario: String,
    /// The row's headline figure for the side-by-side summary (ms a step or an execution, or
    /// steps/s), and its CPU per unit (worker + Kafka + Cassandra, net of the observer).
    pub(crate) figure: Option<f64>,
    pub(crate) cpu_ms: Option<f64>,
    pub(crate) n: String,
    pub(crate) p50: String,
    pub(crate) p99: String,
    pub(crate) rate: String,
    pub(crate) cpu: String,
    pub(crate) rss: String,
    pub(crate) notes: String,
}

impl Row {
    pub(crate) fn new(scenario: impl Into<String>) -> Row {
        Row {
            scenario: scenario.into(),
            ..Row::default()
        }
    }

    pub(crate) fn latency(mut self, samples: &[f64]) -> Row {
        if samples.is_empty() {
            self.n = "0".to_owned();
            return self;
        }
        let s = stats(samples);
        self.n = s.n.to_string();
        self.p50 = format!("{:.2} ms", s.p50);
        self.p99 = format!("{:.2} ms", s.p99);
        self
    }

    pub(crate) fn cells(&self) -> [&str; 8] {
        [
            &self.scenario,
            &self.n,
            &self.p50,
            &self.p99,
            &self.rate,
            &self.cpu,
            &self.rss,
            &self.notes,
        ]
    }
}

pub(crate) const HEADER: [&str; 8] = [
    "scenario",
    "n",
    "p50",
    "p99",
    "steps/s",
    "CPU: worker / kafka / cassandra",
    "worker RSS",
    "notes",
];

pub(crate) fn print_table(rows: &[Row]) {
    let mut widths = HEADER.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.cells()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 8]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(HEADER);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("|-{}-|", rule.join("-|-"));
    for row in rows {
        line(row.cells());
    }
}

/// Prints a row at once (a run cut short keeps what it measured) and keeps it for the table.
pub(crate) fn report(rows: &mut Vec<Row>, row: Row) {
    println!("  -> {}", row.cells().join(" | "));
    rows.push(row);
}

/// [`report`], keeping the row's figure (and its CPU, under `cpu`) for the side-by-side
/// summary.
pub(crate) fn report_as(
    rows: &mut Vec<Row>,
    figures: &mut side_by_side::Figures,
    key: &'static str,
    cpu: Option<&'static str>,
    row: Row,
) {
    if let Some(value) = row.figure {
        figures.set(key, value);
    }
    if let (Some(cpu), Some(value)) = (cpu, row.cpu_ms) {
        figures.set(cpu, value);
    }
    report(rows, row);
}
