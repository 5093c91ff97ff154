//! `plot` and `plot_with`: the interpreter's lists and options record handed to the chart
//! layout (src/plot), which draws SVG or PNG by the file's extension.

use crate::builtins::B;
use crate::eval::machine::Machine;
use crate::plot::{render, Options, Series};
use crate::runtime::perturbed::strip;
use crate::runtime::value::Value;
use crate::runtime::{FResult, Fault};

fn floats(list: &Value) -> Vec<f64> {
    list.iter_list().map(|v| if let Value::Float(x) = strip(v) { x } else { f64::NAN }).collect()
}

/// A field of the options record (the checker has made sure it is there).
fn field(options: &Value, name: &str) -> FResult<Value> {
    let Value::Record(r) = options else { return Err(Fault::internal("plot_with: the options are not a record")) };
    r.names
        .iter()
        .position(|n| &**n == name)
        .map(|i| r.values[i].clone())
        .ok_or_else(|| Fault::internal(format!("plot_with: no option `{name}`")))
}

pub fn call(m: &mut Machine, b: B, arg: &mut dyn FnMut() -> Value) -> FResult<Value> {
    let (options, path, series) = match b {
        B::Plot => {
            let path = arg().as_str()?;
            (Options::default(), path, vec![Series { name: String::new(), values: floats(&arg()) }])
        }
        B::PlotWith => {
            let o = arg();
            let text = |name: &str| -> FResult<String> { Ok(field(&o, name)?.as_str()?.to_string()) };
            let log_y = matches!(field(&o, "log_y")?, Value::Bool(true));
            let options = Options { title: text("title")?, xlabel: text("xlabel")?, ylabel: text("ylabel")?, log_y };
            let path = arg().as_str()?;
            let mut series = Vec::new();
            for item in arg().iter_list() {
                let Value::Tuple(pair) = item else { return Err(Fault::internal("plot_with: a series is not a pair")) };
                series.push(Series { name: pair[0].as_str()?.to_string(), values: floats(&pair[1]) });
            }
            (options, path, series)
        }
        other => return Err(Fault::internal(format!("{other:?} is not a plotting builtin"))),
    };
    render(&path, &options, &series).map_err(Fault::new)?;
    // A notebook shows the chart inline (the Jupyter kernel's reporter); elsewhere a no-op.
    m.reporter.plotted(&path);
    Ok(Value::Unit)
}
