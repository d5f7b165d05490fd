//! Component builds in the store (`weir deploy`): a build's bytes in chunks of
//! [`COMPONENT_CHUNK_BYTES`](crate::store::COMPONENT_CHUNK_BYTES), then its header, written
//! last, so that a build is read whole or not at all.

use chrono::{DateTime, Utc};

use super::{CqlStore, execute_error, result_error};
use crate::store::{ComponentBuild, StoreError};

impl CqlStore {
    /// Writes a build in chunks, then its header (a reader sees it whole or not at all).
    pub(super) async fn write_build(&self, build: &ComponentBuild) -> Result<(), StoreError> {
        let digest = build.digest.as_str();
        let chunks: Vec<&[u8]> = if build.bytes.is_empty() {
            vec![&[]]
        } else {
            build
                .bytes
                .chunks(crate::store::COMPONENT_CHUNK_BYTES)
                .collect()
        };
        for (i, chunk) in chunks.iter().enumerate() {
            let index = i32::try_from(i).map_err(|_| StoreError::Result {
                context: format!("write component build {digest}"),
                reason: format!("{} bytes is too large to store", build.bytes.len()),
            })?;
            self.session
                .execute_unpaged(&self.statements.insert_build_chunk, (digest, index, *chunk))
                .await
                .map_err(execute_error(format!(
                    "write chunk {index} of component build {digest} (`{}`)",
                    build.name
                )))?;
        }
        let size = i64::try_from(build.bytes.len()).unwrap_or(i64::MAX);
        let count = i32::try_from(chunks.len()).unwrap_or(i32::MAX);
        self.session
            .execute_unpaged(
                &self.statements.insert_build_header,
                (
                    digest,
                    build.name.as_str(),
                    size,
                    count,
                    build.registered_at,
                ),
            )
            .await
            .map_err(execute_error(format!(
                "write the header of component build {digest} (`{}`)",
                build.name
            )))?;
        Ok(())
    }

    /// The build under `digest`, once its header is written.
    pub(super) async fn read_build(
        &self,
        digest: &str,
    ) -> Result<Option<ComponentBuild>, StoreError> {
        let Some((name, size, chunks, registered_at)) = self.build_header(digest).await? else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        for chunk in 0..chunks {
            let context = format!("read chunk {chunk} of component build {digest}");
            let result = self
                .session
                .execute_unpaged(&self.statements.select_build_chunk, (digest, chunk))
                .await
                .map_err(execute_error(context.clone()))?;
            let rows = result
                .into_rows_result()
                .map_err(|e| result_error(&context, e))?;
            let Some((Some(part),)) = rows
                .maybe_first_row::<(Option<Vec<u8>>,)>()
                .map_err(|e| result_error(&context, e))?
            else {
                return Err(StoreError::Result {
                    context,
                    reason: format!("the header counts {chunks} chunks; this one is missing"),
                });
            };
            bytes.extend_from_slice(&part);
        }
        if i64::try_from(bytes.len()).ok() != Some(size) {
            return Err(StoreError::Result {
                context: format!("read component build {digest}"),
                reason: format!("{} bytes read, the header says {size}", bytes.len()),
            });
        }
        Ok(Some(ComponentBuild {
            digest: digest.to_owned(),
            name,
            bytes,
            registered_at,
        }))
    }

    /// The header of the build under `digest`: its name, size, chunk count and time, once
    /// every chunk is written (the header is written last).
    pub(super) async fn build_header(
        &self,
        digest: &str,
    ) -> Result<Option<(String, i64, i32, DateTime<Utc>)>, StoreError> {
        let context = format!("read the header of component build {digest}");
        let result = self
            .session
            .execute_unpaged(&self.statements.select_build_header, (digest,))
            .await
            .map_err(execute_error(context.clone()))?;
        let rows = result
            .into_rows_result()
            .map_err(|e| result_error(&context, e))?;
        type Header = (
            Option<String>,
            Option<i64>,
            Option<i32>,
            Option<DateTime<Utc>>,
        );
        Ok(
            match rows
                .maybe_first_row::<Header>()
                .map_err(|e| result_error(&context, e))?
            {
                Some((Some(name), Some(size), Some(chunks), Some(at))) => {
                    Some((name, size, chunks, at))
                }
                _ => None,
            },
        )
    }
}
