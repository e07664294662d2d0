//! The SVG chart of a run: latency percentiles per second (log scale) above, workers holding
//! a task and the request rate below.
//!
//! Owns: the drawing, from the report's timeline only.
//! Must not: measure or compute anything the report does not already hold.

use plotters::prelude::*;

use super::SimError;
use super::measure::SecondSample;

fn chart_err<E: std::fmt::Display>(e: E) -> SimError {
    SimError::Chart(e.to_string())
}

type Pick = fn(&SecondSample) -> f64;

/// Draws `timeline` as an SVG document.
pub fn render_svg(timeline: &[SecondSample], title: &str) -> Result<String, SimError> {
    let mut svg = String::new();
    draw(&mut svg, timeline, title)?;
    Ok(svg)
}

fn draw(out: &mut String, timeline: &[SecondSample], title: &str) -> Result<(), SimError> {
    let root = SVGBackend::with_string(out, (1100, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_err)?;
    let (top, bottom) = root.split_vertically(400);
    let x_max = (timeline.len().max(1)) as f64;
    let active: Vec<&SecondSample> = timeline.iter().filter(|s| s.calls > 0).collect();

    // Latency percentiles, log scale.
    let y_min = active
        .iter()
        .map(|s| s.p50_ms)
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min)
        .clamp(0.01, 1.0)
        / 2.0;
    let y_max = active
        .iter()
        .map(|s| s.max_ms)
        .fold(1.0, f64::max)
        .max(y_min * 10.0)
        * 2.0;
    let mut c = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())
        .map_err(chart_err)?;
    c.configure_mesh()
        .x_desc("seconds since start")
        .y_desc("latency, all calls (ms)")
        .draw()
        .map_err(chart_err)?;
    let lines: [(&str, RGBColor, Pick); 4] = [
        ("p50", BLUE, |s| s.p50_ms),
        ("p90", GREEN, |s| s.p90_ms),
        ("p99", RGBColor(230, 140, 0), |s| s.p99_ms),
        ("max", RED, |s| s.max_ms),
    ];
    for (name, color, pick) in lines {
        c.draw_series(LineSeries::new(
            active
                .iter()
                .map(|s| (s.t as f64 + 0.5, pick(s).max(y_min))),
            color.stroke_width(2),
        ))
        .map_err(chart_err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(chart_err)?;

    // Workers holding a task (left axis) and calls per second (right axis).
    let w_max = timeline
        .iter()
        .map(|s| s.assigned)
        .max()
        .unwrap_or(0)
        .max(1) as f64
        * 1.1;
    let r_max = timeline.iter().map(|s| s.calls).max().unwrap_or(0).max(1) as f64 * 1.1;
    let mut c = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .right_y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..w_max)
        .map_err(chart_err)?
        .set_secondary_coord(0f64..x_max, 0f64..r_max);
    c.configure_mesh()
        .x_desc("seconds since start")
        .y_desc("workers holding a task")
        .draw()
        .map_err(chart_err)?;
    c.configure_secondary_axes()
        .y_desc("calls per second")
        .draw()
        .map_err(chart_err)?;
    let blue = BLUE;
    c.draw_series(LineSeries::new(
        timeline
            .iter()
            .map(|s| (s.t as f64 + 0.5, s.assigned as f64)),
        blue.stroke_width(2),
    ))
    .map_err(chart_err)?
    .label("workers holding a task")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2)));
    let grey = RGBColor(120, 120, 120);
    c.draw_secondary_series(LineSeries::new(
        timeline.iter().map(|s| (s.t as f64 + 0.5, s.calls as f64)),
        grey.stroke_width(1),
    ))
    .map_err(chart_err)?
    .label("calls/s")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1)));
    let orange = RGBColor(230, 140, 0);
    c.draw_secondary_series(LineSeries::new(
        timeline
            .iter()
            .map(|s| (s.t as f64 + 0.5, s.too_busy as f64)),
        orange.stroke_width(1),
    ))
    .map_err(chart_err)?
    .label("too busy/s")
    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], orange.stroke_width(1)));
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(chart_err)?;
    root.present().map_err(chart_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_timeline() {
        let timeline: Vec<SecondSample> = (0..30)
            .map(|t| SecondSample {
                t,
                calls: 100 + t,
                request_task: 10,
                too_busy: t % 3,
                errors: 0,
                assigned: (t * 10) as i64,
                p50_ms: 1.0 + t as f64 / 10.0,
                p90_ms: 2.0,
                p99_ms: 5.0,
                max_ms: 20.0,
                ..SecondSample::default()
            })
            .collect();
        let svg = render_svg(&timeline, "test").expect("chart");
        assert!(svg.starts_with("<svg") && svg.contains("workers holding a task"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
        // An empty run still gives a chart.
        assert!(
            render_svg(&[], "empty")
                .expect("empty chart")
                .starts_with("<svg")
        );
    }
}
