//! The CQL schema of `schemas/cql/tables.cql`: applied idempotently, and checked column by
//! column against `system_schema` afterwards, because `CREATE TABLE IF NOT EXISTS` silently
//! keeps a table that exists with other columns.

use std::collections::BTreeMap;
use std::fmt;

use scylla::client::session::Session;

use super::session::{StoreError, validate_keyspace};

/// The schema shipped with this build of Weir.
pub const TABLES_CQL: &str = include_str!("../../../schemas/cql/tables.cql");

/// The role of a column in its table, as `system_schema.columns.kind` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    PartitionKey(i32),
    Clustering(i32),
    Regular,
    Static,
}

impl fmt::Display for ColumnKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnKind::PartitionKey(p) => write!(f, "partition key #{p}"),
            ColumnKind::Clustering(p) => write!(f, "clustering key #{p}"),
            ColumnKind::Regular => f.write_str("regular column"),
            ColumnKind::Static => f.write_str("static column"),
        }
    }
}

/// A table as the schema file declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub name: String,
    /// Column name → (CQL type, kind).
    pub columns: BTreeMap<String, (String, ColumnKind)>,
    /// The statement that creates it (unqualified: run with the keyspace prefixed).
    pub create_statement: String,
}

/// What `apply` did for one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableOutcome {
    Created,
    Unchanged,
}

/// Parses the `CREATE TABLE IF NOT EXISTS` statements of a schema file.
pub fn parse_tables(cql: &str) -> Result<Vec<TableSpec>, StoreError> {
    let without_comments: String = cql
        .lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    without_comments
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse_create_table)
        .collect()
}

fn parse_create_table(statement: &str) -> Result<TableSpec, StoreError> {
    let bad = |why: &str| StoreError::SchemaFile(format!("{why} in `{statement}`"));
    let normalized = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    let rest = normalized
        .strip_prefix("CREATE TABLE IF NOT EXISTS ")
        .ok_or_else(|| bad("only `CREATE TABLE IF NOT EXISTS` statements are allowed"))?;
    let open = rest.find('(').ok_or_else(|| bad("no column list"))?;
    let name = rest[..open].trim().to_owned();
    let body = matching_parenthesis(&rest[open..]).ok_or_else(|| bad("unbalanced parentheses"))?;

    let mut columns: Vec<(String, String)> = Vec::new();
    let mut statics = Vec::new();
    let mut primary_key: Option<String> = None;
    for item in split_top_level(body) {
        if let Some(pk) = item.strip_prefix("PRIMARY KEY") {
            primary_key = Some(pk.trim().to_owned());
            continue;
        }
        let (column, definition) = item
            .split_once(' ')
            .ok_or_else(|| bad("column without type"))?;
        let mut definition = definition.trim();
        if let Some(ty) = definition.strip_suffix(" PRIMARY KEY") {
            primary_key = Some(format!("({column})"));
            definition = ty;
        }
        // CQL keywords are case-insensitive.
        if let Some(ty) = definition
            .strip_suffix(" STATIC")
            .or_else(|| definition.strip_suffix(" static"))
        {
            statics.push(column.to_owned());
            definition = ty;
        }
        columns.push((column.to_owned(), definition.to_owned()));
    }
    let primary_key = primary_key.ok_or_else(|| bad("no PRIMARY KEY"))?;
    let key_body =
        matching_parenthesis(&primary_key).ok_or_else(|| bad("malformed PRIMARY KEY"))?;
    let key_parts = split_top_level(key_body);
    let (partition, clustering): (Vec<String>, Vec<String>) = match key_parts.split_first() {
        Some((first, rest)) => {
            let partition = match first.strip_prefix('(') {
                Some(_) => split_top_level(
                    matching_parenthesis(first).ok_or_else(|| bad("malformed partition key"))?,
                ),
                None => vec![first.clone()],
            };
            (partition, rest.to_vec())
        }
        None => return Err(bad("empty PRIMARY KEY")),
    };

    let mut spec_columns = BTreeMap::new();
    for (column, ty) in columns {
        let kind = if let Some(p) = partition.iter().position(|c| *c == column) {
            ColumnKind::PartitionKey(p as i32)
        } else if let Some(p) = clustering.iter().position(|c| *c == column) {
            ColumnKind::Clustering(p as i32)
        } else if statics.contains(&column) {
            ColumnKind::Static
        } else {
            ColumnKind::Regular
        };
        spec_columns.insert(column, (ty, kind));
    }
    for key in partition.iter().chain(&clustering) {
        if !spec_columns.contains_key(key) {
            return Err(bad(&format!("key column `{key}` is not declared")));
        }
    }
    Ok(TableSpec {
        name,
        columns: spec_columns,
        create_statement: normalized,
    })
}

/// The content between `s`'s leading `(` and its matching `)`.
fn matching_parenthesis(s: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&s[1..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits on commas outside parentheses and angle brackets (`map<text, int>` stays whole).
fn split_top_level(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for c in s.chars() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(current.trim().to_owned());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        parts.push(current.trim().to_owned());
    }
    parts
}

/// Creates the keyspace (if `create`) and every table of `tables`, then compares each table
/// with `system_schema`. Returns what happened per table, or every difference found.
pub async fn apply(
    session: &Session,
    keyspace: &str,
    replication_factor: u32,
    tables: &[TableSpec],
    create: bool,
) -> Result<Vec<(String, TableOutcome)>, StoreError> {
    validate_keyspace(keyspace)?;
    let existing_before = existing_tables(session, keyspace).await?;
    if create {
        let statement = format!(
            "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
             {{'class': 'NetworkTopologyStrategy', 'replication_factor': {replication_factor}}}"
        );
        run(session, statement, "create keyspace").await?;
        for table in tables {
            let qualified = table.create_statement.replacen(
                &format!("CREATE TABLE IF NOT EXISTS {}", table.name),
                &format!("CREATE TABLE IF NOT EXISTS {keyspace}.{}", table.name),
                1,
            );
            run(
                session,
                qualified,
                &format!("create table {keyspace}.{}", table.name),
            )
            .await?;
        }
    }
    let mut drift = Vec::new();
    let mut outcomes = Vec::new();
    for table in tables {
        let actual = table_columns(session, keyspace, &table.name).await?;
        if actual.is_empty() {
            drift.push(format!("table `{keyspace}.{}` does not exist", table.name));
            continue;
        }
        drift.extend(compare_columns(keyspace, table, &actual));
        let outcome = if existing_before.contains(&table.name) {
            TableOutcome::Unchanged
        } else {
            TableOutcome::Created
        };
        outcomes.push((table.name.clone(), outcome));
    }
    if drift.is_empty() {
        Ok(outcomes)
    } else {
        Err(StoreError::Drift {
            keyspace: keyspace.to_owned(),
            drift,
        })
    }
}

/// Every difference between a declared table and the columns the store reports.
pub fn compare_columns(
    keyspace: &str,
    table: &TableSpec,
    actual: &BTreeMap<String, (String, ColumnKind)>,
) -> Vec<String> {
    let name = format!("{keyspace}.{}", table.name);
    let mut drift = Vec::new();
    for (column, (ty, kind)) in &table.columns {
        match actual.get(column) {
            None => drift.push(format!("table `{name}` lacks column `{column}` ({ty}, {kind})")),
            Some((actual_ty, actual_kind)) if (actual_ty, actual_kind) != (ty, kind) => drift.push(format!(
                "column `{name}.{column}` is {actual_ty} ({actual_kind}), schemas/cql says {ty} ({kind})"
            )),
            Some(_) => {}
        }
    }
    for (column, (ty, kind)) in actual {
        if !table.columns.contains_key(column) {
            drift.push(format!(
                "table `{name}` has column `{column}` ({ty}, {kind}) that schemas/cql does not declare"
            ));
        }
    }
    drift
}

/// How long a schema change may take: on a busy node (two cores, a test suite running) a
/// `CREATE TABLE` took longer than the session's 30 s default and `topology apply` failed,
/// though the statement is idempotent and the node was only slow.
const SCHEMA_CHANGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

async fn run(session: &Session, statement: String, context: &str) -> Result<(), StoreError> {
    let mut statement = scylla::statement::Statement::new(statement);
    statement.set_request_timeout(Some(SCHEMA_CHANGE_TIMEOUT));
    session
        .query_unpaged(statement, ())
        .await
        .map_err(|source| StoreError::Execute {
            context: context.to_owned(),
            source: Box::new(source),
        })?;
    Ok(())
}

async fn existing_tables(session: &Session, keyspace: &str) -> Result<Vec<String>, StoreError> {
    let context = format!("list tables of {keyspace}");
    let result = session
        .query_unpaged(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await
        .map_err(|source| StoreError::Execute {
            context: context.clone(),
            source: Box::new(source),
        })?;
    let rows = result.into_rows_result().map_err(|e| StoreError::Result {
        context: context.clone(),
        reason: e.to_string(),
    })?;
    rows.rows::<(String,)>()
        .map_err(|e| StoreError::Result {
            context: context.clone(),
            reason: e.to_string(),
        })?
        .map(|row| {
            row.map(|(name,)| name).map_err(|e| StoreError::Result {
                context: context.clone(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The columns of a table as `system_schema.columns` reports them (empty if it does not exist).
pub async fn table_columns(
    session: &Session,
    keyspace: &str,
    table: &str,
) -> Result<BTreeMap<String, (String, ColumnKind)>, StoreError> {
    let context = format!("describe columns of {keyspace}.{table}");
    let result_error = |reason: String| StoreError::Result {
        context: context.clone(),
        reason,
    };
    let result = session
        .query_unpaged(
            "SELECT column_name, type, kind, position FROM system_schema.columns \
             WHERE keyspace_name = ? AND table_name = ?",
            (keyspace, table),
        )
        .await
        .map_err(|source| StoreError::Execute {
            context: context.clone(),
            source: Box::new(source),
        })?;
    let rows = result
        .into_rows_result()
        .map_err(|e| result_error(e.to_string()))?;
    let mut columns = BTreeMap::new();
    for row in rows
        .rows::<(String, String, String, i32)>()
        .map_err(|e| result_error(e.to_string()))?
    {
        let (name, ty, kind, position) = row.map_err(|e| result_error(e.to_string()))?;
        let kind = match kind.as_str() {
            "partition_key" => ColumnKind::PartitionKey(position),
            "clustering" => ColumnKind::Clustering(position),
            "static" => ColumnKind::Static,
            "regular" => ColumnKind::Regular,
            other => return Err(result_error(format!("unknown column kind `{other}`"))),
        };
        columns.insert(name, (ty, kind));
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_schema_parses_with_its_keys() {
        let tables = parse_tables(TABLES_CQL).unwrap();
        let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "executions",
                "history",
                "executions_by_function",
                "executions_by_parent",
                "functions",
                "timers",
                "checkpoints",
                "timer_watermarks",
                "component_builds"
            ]
        );
        let table = |name: &str| tables.iter().find(|t| t.name == name).expect(name);
        let history = table("history");
        assert_eq!(
            history.columns["execution_id"],
            ("text".to_owned(), ColumnKind::PartitionKey(0))
        );
        assert_eq!(
            history.columns["seq"],
            ("bigint".to_owned(), ColumnKind::Clustering(0))
        );
        let timers = table("timers");
        assert_eq!(timers.columns["time_bucket"].1, ColumnKind::PartitionKey(1));
        assert_eq!(timers.columns["timer_id"].1, ColumnKind::Clustering(1));
        assert_eq!(timers.columns["payload"].1, ColumnKind::Regular);
        assert_eq!(
            table("executions").columns["execution_id"].1,
            ColumnKind::PartitionKey(0)
        );
        assert_eq!(
            table("checkpoints").columns["kafka_partition"].1,
            ColumnKind::PartitionKey(1)
        );
        let by_function = table("executions_by_function");
        assert_eq!(
            by_function.columns["created_day"].1,
            ColumnKind::PartitionKey(1)
        );
        assert_eq!(
            by_function.columns["created_at"].1,
            ColumnKind::Clustering(0)
        );
        assert_eq!(
            by_function.columns["execution_id"].1,
            ColumnKind::Clustering(1)
        );
        assert_eq!(
            table("executions_by_parent").columns["parent_id"].1,
            ColumnKind::PartitionKey(0)
        );
    }

    #[test]
    fn collection_types_and_static_columns_parse() {
        let tables = parse_tables(
            "CREATE TABLE IF NOT EXISTS t (a text, b map<text, int>, s int STATIC, \
             l text static, PRIMARY KEY ((a), b));",
        )
        .unwrap();
        assert_eq!(
            tables[0].columns["b"],
            ("map<text, int>".to_owned(), ColumnKind::Clustering(0))
        );
        assert_eq!(tables[0].columns["s"].1, ColumnKind::Static);
        assert_eq!(
            tables[0].columns["l"],
            ("text".to_owned(), ColumnKind::Static)
        );
    }

    #[test]
    fn malformed_statements_are_rejected() {
        for bad in [
            "CREATE TABLE t (a text PRIMARY KEY)",
            "CREATE TABLE IF NOT EXISTS t (a text)",
            "CREATE TABLE IF NOT EXISTS t (a text, PRIMARY KEY (b))",
            "CREATE TABLE IF NOT EXISTS t (a text PRIMARY KEY",
        ] {
            assert!(parse_tables(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn drift_names_missing_extra_and_changed_columns() {
        let table =
            &parse_tables("CREATE TABLE IF NOT EXISTS t (a text PRIMARY KEY, b int, c blob);")
                .unwrap()[0];
        let mut actual = table.columns.clone();
        actual.remove("c");
        actual.insert("b".into(), ("bigint".into(), ColumnKind::Regular));
        actual.insert("d".into(), ("text".into(), ColumnKind::Regular));
        let drift = compare_columns("ks", table, &actual);
        assert_eq!(drift.len(), 3, "{drift:?}");
        assert!(drift[0].contains("`ks.t.b` is bigint"), "{drift:?}");
        assert!(drift[1].contains("lacks column `c`"), "{drift:?}");
        assert!(drift[2].contains("column `d`"), "{drift:?}");
        assert!(compare_columns("ks", table, &table.columns).is_empty());
    }
}
