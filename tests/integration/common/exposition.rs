//! A strict parser for the Prometheus text exposition format (version 0.0.4), so tests check
//! families, label sets and values exactly instead of grepping for substrings.

use std::collections::{BTreeMap, BTreeSet};

/// Label name → value.
pub type Labels = BTreeMap<String, String>;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample name (for histograms: `<family>_bucket`, `_sum` or `_count`).
    pub name: String,
    /// Its labels.
    pub labels: Labels,
    /// Its value.
    pub value: f64,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// Family name → type (`counter`, `gauge`, `histogram`, ...).
    pub types: BTreeMap<String, String>,
    /// Family name → help text.
    pub help: BTreeMap<String, String>,
    /// Every sample, in order.
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// Parses and validates a scrape: every sample belongs to a family declared by `# TYPE`
    /// before it, no series repeats, histogram buckets are cumulative and end in `+Inf` = count.
    pub fn parse(text: &str) -> Result<Exposition, String> {
        let mut out = Exposition::default();
        let mut seen = BTreeSet::new();
        for (n, line) in text.lines().enumerate() {
            let at = |msg: String| format!("line {}: {msg}: {line:?}", n + 1);
            if line.trim().is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let mut parts = rest.splitn(3, ' ');
                let previous = match (parts.next(), parts.next(), parts.next()) {
                    (Some("TYPE"), Some(name), Some(kind)) => {
                        out.types.insert(name.into(), kind.into())
                    }
                    (Some("HELP"), Some(name), help) => {
                        out.help.insert(name.into(), help.unwrap_or("").into())
                    }
                    _ => None,
                };
                if previous.is_some() {
                    return Err(at("TYPE or HELP declared twice".into()));
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let sample = parse_sample(line).map_err(at)?;
            out.family_of(&sample.name)
                .ok_or_else(|| at("no TYPE".into()))?;
            let key = (sample.name.clone(), sample.labels.clone());
            if !seen.insert(key) {
                return Err(at("duplicate series".into()));
            }
            out.samples.push(sample);
        }
        out.check_histograms()?;
        Ok(out)
    }

    /// The family a sample name belongs to, if its family was declared.
    pub fn family_of(&self, sample: &str) -> Option<String> {
        if self.types.contains_key(sample) {
            return Some(sample.to_string());
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = sample.strip_suffix(suffix) {
                if self.types.get(base).map(String::as_str) == Some("histogram") {
                    return Some(base.to_string());
                }
            }
        }
        None
    }

    /// Every sample with exactly this name.
    pub fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// The value of the sample with this name and exactly these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want = labels_of(labels);
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Histogram buckets of one series (labels without `le`): `(le, cumulative count)`.
    pub fn buckets(&self, family: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
        let want = labels_of(labels);
        self.series(&format!("{family}_bucket"))
            .into_iter()
            .filter(|s| {
                let mut l = s.labels.clone();
                l.remove("le");
                l == want
            })
            .map(|s| (s.labels["le"].clone(), s.value))
            .collect()
    }

    fn check_histograms(&self) -> Result<(), String> {
        for (family, kind) in &self.types {
            if kind != "histogram" {
                continue;
            }
            for count in self.series(&format!("{family}_count")) {
                let pairs: Vec<(&str, &str)> = count
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let buckets = self.buckets(family, &pairs);
                let mut last = 0.0;
                let mut last_le = f64::NEG_INFINITY;
                for (le, c) in &buckets {
                    let bound = parse_value(le)?;
                    if bound <= last_le || *c < last {
                        return Err(format!(
                            "{family}{:?}: buckets not cumulative",
                            count.labels
                        ));
                    }
                    last_le = bound;
                    last = *c;
                }
                match buckets.last() {
                    Some((le, c)) if le == "+Inf" && *c == count.value => {}
                    _ => return Err(format!("{family}{:?}: +Inf != count", count.labels)),
                }
                if self.value(&format!("{family}_sum"), &pairs).is_none() {
                    return Err(format!("{family}{:?}: no _sum", count.labels));
                }
            }
        }
        Ok(())
    }
}

/// Labels from pairs.
pub fn labels_of(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map(|(i, _)| i)
        .unwrap_or(line.len());
    if name_end == 0 {
        return Err("no metric name".into());
    }
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Labels::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next().ok_or("no value")?)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing text".into());
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// Parses `name="value",...}`; returns the labels and the text after `}`.
fn parse_labels(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Labels::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = s.find('=').ok_or("label without =")?;
        let name = s[..eq].trim();
        if name.is_empty()
            || !name
                .chars()
                .enumerate()
                .all(|(i, c)| is_name_char(c, i == 0))
        {
            return Err(format!("bad label name {name:?}"));
        }
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} repeated"));
        }
        s = &s[end + 1..];
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

fn parse_value(v: &str) -> Result<f64, String> {
    match v {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => v.parse().map_err(|_| format!("bad value {v:?}")),
    }
}
