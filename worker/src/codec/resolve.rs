//! Avro schema resolution (writer schema → reader schema) of a decoded value, per the Avro
//! specification.
//!
//! apache-avro's own resolution (`Value::resolve`, and `GenericDatumReader` with a reader schema)
//! picks a union branch by trying the reader's branches in order and taking the first one the
//! value can be coerced into, ignoring record names: a `ResultErr { value }` resolves to the
//! earlier `ResultOk { value }`, any record to an empty one (`ScheduleNow`), a `JoinNext` to a
//! `JoinSetCreate`. The specification matches union branches by name for named types, which
//! is what this module does: records and enums by unqualified name (or alias), then fields by
//! name with the reader's defaults, enum symbols by name with the reader's default, primitive
//! promotions (int → long → float → double, string ↔ bytes).

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::{RecordField, SchemaKind};
use apache_avro::types::Value;

/// Resolves `value`, decoded with `writer`, to `reader`.
pub(crate) fn resolve(value: Value, writer: &Schema, reader: &Schema) -> Result<Value, String> {
    let mut ctx = Resolver {
        writer_names: HashMap::new(),
        reader_names: HashMap::new(),
    };
    collect(writer, &mut ctx.writer_names);
    collect(reader, &mut ctx.reader_names);
    ctx.resolve(value, writer, reader, "")
}

struct Resolver<'a> {
    writer_names: HashMap<&'a str, &'a Schema>,
    reader_names: HashMap<&'a str, &'a Schema>,
}

/// The named types defined in `schema`, by unqualified name.
fn collect<'a>(schema: &'a Schema, out: &mut HashMap<&'a str, &'a Schema>) {
    match schema {
        Schema::Record(r) => {
            out.insert(r.name.name(), schema);
            for f in &r.fields {
                collect(&f.schema, out);
            }
        }
        Schema::Enum(e) => {
            out.insert(e.name.name(), schema);
        }
        Schema::Fixed(f) => {
            out.insert(f.name.name(), schema);
        }
        Schema::Union(u) => u.variants().iter().for_each(|v| collect(v, out)),
        Schema::Array(a) => collect(&a.items, out),
        Schema::Map(m) => collect(&m.types, out),
        _ => {}
    }
}

fn deref<'a>(schema: &'a Schema, names: &HashMap<&'a str, &'a Schema>) -> &'a Schema {
    match schema {
        Schema::Ref { name } => names.get(name.name()).copied().unwrap_or(schema),
        _ => schema,
    }
}

fn named(schema: &Schema) -> Option<(&str, Vec<&str>)> {
    match schema {
        Schema::Record(r) => Some((
            r.name.name(),
            r.aliases
                .iter()
                .flatten()
                .map(|a| a.name())
                .collect::<Vec<_>>(),
        )),
        Schema::Enum(e) => Some((
            e.name.name(),
            e.aliases.iter().flatten().map(|a| a.name()).collect(),
        )),
        Schema::Fixed(f) => Some((
            f.name.name(),
            f.aliases.iter().flatten().map(|a| a.name()).collect(),
        )),
        _ => None,
    }
}

fn promotable(writer: SchemaKind, reader: SchemaKind) -> bool {
    use SchemaKind::*;
    writer == reader
        || matches!(
            (writer, reader),
            (Int, Long | Float | Double)
                | (Long, Float | Double)
                | (Float, Double)
                | (String, Bytes)
                | (Bytes, String)
        )
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

impl<'a> Resolver<'a> {
    /// Whether writer schema `w` matches reader schema `r` (both dereferenced), for union
    /// branch selection.
    fn matches(&self, w: &Schema, r: &Schema) -> bool {
        match (named(w), named(r)) {
            (Some((wn, _)), Some((rn, aliases))) => {
                SchemaKind::from(w) == SchemaKind::from(r) && (wn == rn || aliases.contains(&wn))
            }
            (None, None) => promotable(SchemaKind::from(w), SchemaKind::from(r)),
            _ => false,
        }
    }

    fn resolve(
        &self,
        value: Value,
        writer: &'a Schema,
        reader: &'a Schema,
        path: &str,
    ) -> Result<Value, String> {
        let w = deref(writer, &self.writer_names);
        let r = deref(reader, &self.reader_names);
        match (w, r) {
            (Schema::Union(wu), _) => {
                let Value::Union(i, inner) = value else {
                    return Err(format!("{path}: expected a union value"));
                };
                let branch = wu
                    .variants()
                    .get(i as usize)
                    .ok_or_else(|| format!("{path}: writer union has no branch {i}"))?;
                self.resolve(*inner, branch, reader, path)
            }
            (_, Schema::Union(ru)) => {
                let (j, branch) = ru
                    .variants()
                    .iter()
                    .enumerate()
                    .find(|(_, b)| self.matches(w, deref(b, &self.reader_names)))
                    .ok_or_else(|| {
                        format!("{path}: no branch of the reader's union matches {w:?}")
                    })?;
                Ok(Value::Union(
                    j as u32,
                    Box::new(self.resolve(value, writer, branch, path)?),
                ))
            }
            (Schema::Record(wr), Schema::Record(rr)) => {
                if !self.matches(w, r) {
                    return Err(format!(
                        "{path}: record {} cannot be read as {}",
                        wr.name.name(),
                        rr.name.name()
                    ));
                }
                let Value::Record(fields) = value else {
                    return Err(format!("{path}: expected a record value"));
                };
                let mut by_name: HashMap<String, Value> = fields.into_iter().collect();
                let mut out = Vec::with_capacity(rr.fields.len());
                for rf in &rr.fields {
                    let fpath = join(path, &rf.name);
                    let wf = wr
                        .fields
                        .iter()
                        .find(|wf| wf.name == rf.name || rf.aliases.contains(&wf.name));
                    let v = match wf.and_then(|wf| by_name.remove(&wf.name).map(|v| (wf, v))) {
                        Some((wf, v)) => self.resolve(v, &wf.schema, &rf.schema, &fpath)?,
                        None => self.default(rf, &fpath)?,
                    };
                    out.push((rf.name.clone(), v));
                }
                Ok(Value::Record(out))
            }
            (Schema::Enum(_), Schema::Enum(re)) => {
                if !self.matches(w, r) {
                    return Err(format!("{path}: enum {w:?} cannot be read as {r:?}"));
                }
                let Value::Enum(_, symbol) = value else {
                    return Err(format!("{path}: expected an enum value"));
                };
                let symbol = if re.symbols.contains(&symbol) {
                    symbol
                } else {
                    re.default.clone().ok_or_else(|| {
                        format!(
                            "{path}: symbol {symbol} is unknown to the reader, which has no default"
                        )
                    })?
                };
                let index = re
                    .symbols
                    .iter()
                    .position(|s| *s == symbol)
                    .ok_or_else(|| {
                        format!("{path}: the reader's default symbol {symbol} is not a symbol")
                    })?;
                Ok(Value::Enum(index as u32, symbol))
            }
            (Schema::Array(wa), Schema::Array(ra)) => match value {
                Value::Array(items) => items
                    .into_iter()
                    .map(|v| self.resolve(v, &wa.items, &ra.items, path))
                    .collect::<Result<_, _>>()
                    .map(Value::Array),
                _ => Err(format!("{path}: expected an array value")),
            },
            (Schema::Map(wm), Schema::Map(rm)) => match value {
                Value::Map(items) => items
                    .into_iter()
                    .map(|(k, v)| Ok((k, self.resolve(v, &wm.types, &rm.types, path)?)))
                    .collect::<Result<_, String>>()
                    .map(Value::Map),
                _ => Err(format!("{path}: expected a map value")),
            },
            _ => {
                let (wk, rk) = (SchemaKind::from(w), SchemaKind::from(r));
                if wk == rk {
                    return Ok(value);
                }
                if !promotable(wk, rk) {
                    return Err(format!("{path}: {wk:?} cannot be read as {rk:?}"));
                }
                Ok(match (value, rk) {
                    (Value::Int(n), SchemaKind::Long) => Value::Long(n.into()),
                    (Value::Int(n), SchemaKind::Float) => Value::Float(n as f32),
                    (Value::Int(n), SchemaKind::Double) => Value::Double(n.into()),
                    (Value::Long(n), SchemaKind::Float) => Value::Float(n as f32),
                    (Value::Long(n), SchemaKind::Double) => Value::Double(n as f64),
                    (Value::Float(n), SchemaKind::Double) => Value::Double(n.into()),
                    (Value::String(s), SchemaKind::Bytes) => Value::Bytes(s.into_bytes()),
                    (Value::Bytes(b), SchemaKind::String) => {
                        Value::String(String::from_utf8(b).map_err(|e| format!("{path}: {e}"))?)
                    }
                    (v, _) => return Err(format!("{path}: cannot promote {v:?} to {rk:?}")),
                })
            }
        }
    }

    /// The reader's default for a field the writer does not have.
    fn default(&self, field: &'a RecordField, path: &str) -> Result<Value, String> {
        let json = field
            .default
            .as_ref()
            .ok_or_else(|| format!("{path}: missing in the writer's schema and has no default"))?;
        self.default_from_json(json, &field.schema, path)
    }

    fn default_from_json(
        &self,
        json: &serde_json::Value,
        schema: &'a Schema,
        path: &str,
    ) -> Result<Value, String> {
        use serde_json::Value as J;
        let schema = deref(schema, &self.reader_names);
        let bad = || format!("{path}: default {json} does not fit {schema:?}");
        Ok(match (schema, json) {
            // A union's default is a value of its first branch.
            (Schema::Union(u), _) => {
                let first = u.variants().first().ok_or_else(bad)?;
                Value::Union(0, Box::new(self.default_from_json(json, first, path)?))
            }
            (Schema::Null, J::Null) => Value::Null,
            (Schema::Boolean, J::Bool(b)) => Value::Boolean(*b),
            (Schema::Int, J::Number(n)) => Value::Int(
                n.as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(bad)?,
            ),
            (Schema::Long, J::Number(n)) => Value::Long(n.as_i64().ok_or_else(bad)?),
            (Schema::Float, J::Number(n)) => Value::Float(n.as_f64().ok_or_else(bad)? as f32),
            (Schema::Double, J::Number(n)) => Value::Double(n.as_f64().ok_or_else(bad)?),
            (Schema::String, J::String(s)) => Value::String(s.clone()),
            (Schema::Bytes, J::String(s)) => Value::Bytes(s.chars().map(|c| c as u8).collect()),
            (Schema::Enum(e), J::String(s)) => Value::Enum(
                e.symbols.iter().position(|x| x == s).ok_or_else(bad)? as u32,
                s.clone(),
            ),
            (Schema::Array(a), J::Array(items)) => Value::Array(
                items
                    .iter()
                    .map(|i| self.default_from_json(i, &a.items, path))
                    .collect::<Result<_, _>>()?,
            ),
            (Schema::Map(m), J::Object(items)) => Value::Map(
                items
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), self.default_from_json(v, &m.types, path)?)))
                    .collect::<Result<_, String>>()?,
            ),
            (Schema::Record(r), J::Object(items)) => Value::Record(
                r.fields
                    .iter()
                    .map(|f| {
                        let fpath = join(path, &f.name);
                        let v = match items.get(&f.name) {
                            Some(v) => self.default_from_json(v, &f.schema, &fpath)?,
                            None => self.default(f, &fpath)?,
                        };
                        Ok((f.name.clone(), v))
                    })
                    .collect::<Result<_, String>>()?,
            ),
            _ => return Err(bad()),
        })
    }
}
