//! The linker of a workflow component: `weir:workflow/host@0.1.0` (join sets, sleep, random
//! values, log) and, dynamically, every interface the workflow imports from registered
//! components, with the extension functions of schemas/wit/README.md §3. Every import is
//! type-checked here (wasmtime does not check `func_new_async` definitions); an import that
//! nothing satisfies (WASI beyond what `wasi.rs` gives included) is a load-time error naming it.

use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::types::{ComponentFunc, ComponentInstance, ComponentItem, Type};
use wasmtime::component::{Linker, LinkerInstance, Resource, ResourceAny, ResourceType, Val};

use crate::model::{ChildKind, ExecutionId, ExecutionResult, Ffqn, HistoryEvent, JoinSetRequest};
use crate::replay::{AwaitNextError, CreateJoinSetError, GetError, Progress, StubError};
use crate::wasm::engine::WasmEngine;
use crate::wasm::registry::{FunctionInfo, LoadedComponent, Registry, RegistryError};
use crate::wasm::values::{self, ProjectionError};
use wasmtime::StoreContextMut;

use super::convert::{self, case, id_record};
use super::query::QueryFunctions;
use super::shapes::{self, Shape, Signature};
use super::{HostFailure, JoinSetResource, WorkflowState, WorkflowTemplate};

const TYPES_PREFIX: &str = "weir:workflow/types@0.1.";
const HOST_PREFIX: &str = "weir:workflow/host@0.1.";

/// How a workflow refers to a target interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Direct,
    Ext,
    Stub,
}

/// `ns:pkg-ext/iface@v` → (`ns:pkg/iface@v`, Ext), etc.
fn parse_import(name: &str) -> (String, Mode) {
    let Some(slash) = name.find('/') else {
        return (name.to_owned(), Mode::Direct);
    };
    let (package, rest) = name.split_at(slash);
    for (suffix, mode) in [("-ext", Mode::Ext), ("-stub", Mode::Stub)] {
        if let Some(base) = package.strip_suffix(suffix) {
            return (format!("{base}{rest}"), mode);
        }
    }
    (name.to_owned(), Mode::Direct)
}

/// The templates of a workflow component's functions: the component linked against the
/// registry ([`workflow_linker`]) and pre-instantiated.
pub(crate) fn workflow_templates(
    engine: &WasmEngine,
    registry: &Registry,
    component: &LoadedComponent,
) -> Result<Vec<(Ffqn, WorkflowTemplate)>, RegistryError> {
    let linker = workflow_linker(engine.engine(), registry, component)?;
    let pre = linker
        .instantiate_pre(&component.component)
        .map_err(|e| RegistryError::Link {
            component: component.spec.name.clone(),
            reason: format!("{e:#}"),
        })?;
    let queries = Arc::new(QueryFunctions {
        component: component.spec.name.clone(),
        pre: pre.clone(),
        functions: component
            .queries
            .iter()
            .map(|f| (f.ffqn.function().to_owned(), f.clone()))
            .collect(),
        limits: component.spec.limits.clone(),
        fuel_yield_interval: engine.config().fuel_yield_interval,
    });
    Ok(component
        .exports
        .iter()
        .map(|f| {
            let template = WorkflowTemplate {
                pre: pre.clone(),
                function: f.clone(),
                limits: component.spec.limits.clone(),
                fuel_yield_interval: engine.config().fuel_yield_interval,
                queries: queries.clone(),
            };
            (f.ffqn.clone(), template)
        })
        .collect())
}

/// Builds the linker that satisfies every import of workflow `component`.
pub(crate) fn workflow_linker(
    engine: &wasmtime::Engine,
    registry: &Registry,
    component: &LoadedComponent,
) -> Result<Linker<WorkflowState>, RegistryError> {
    let name = &component.spec.name;
    let mut linker = Linker::new(engine);
    let link_err = |e: wasmtime::Error| RegistryError::Link {
        component: name.clone(),
        reason: format!("{e:#}"),
    };
    let ty = component.component.component_type();
    let mut wasi_linked = false;
    for (import, item) in ty.imports(engine) {
        let unsatisfied = |reason: String| RegistryError::UnsatisfiedImport {
            component: name.clone(),
            import: import.to_owned(),
            reason,
        };
        let ComponentItem::ComponentInstance(instance) = &item.ty else {
            return Err(unsatisfied(
                "is not an interface (only interfaces are linked)".into(),
            ));
        };
        if import.starts_with(TYPES_PREFIX) {
            // Types only; defining it empty is harmless and keeps the linker explicit.
            linker.instance(import).map_err(link_err)?;
            continue;
        }
        if import.starts_with(HOST_PREFIX) {
            let mut li = linker.instance(import).map_err(link_err)?;
            define_host(&mut li, engine, name, import, instance)?;
            continue;
        }
        if import.starts_with("wasi:") {
            if !super::wasi::provides(import) {
                return Err(unsatisfied(
                    "is WASI that workflows do not get: they get deterministic clocks, random, \
                     cli and io (filesystem and sockets refused); reach the outside from an \
                     activity"
                        .into(),
                ));
            }
            if !wasi_linked {
                super::wasi::add_to_linker(&mut linker).map_err(link_err)?;
                wasi_linked = true;
            }
            continue;
        }
        let (target, mode) = parse_import(import);
        let functions = registry.interface(&target).ok_or_else(|| {
            unsatisfied(format!(
                "no registered component exports (interface `{target}`)"
            ))
        })?;
        if mode == Mode::Stub && !functions.iter().all(|f| f.stub) {
            return Err(unsatisfied(format!(
                "needs `{target}` to be a stub activity, and component `{}` is not one",
                functions[0].component
            )));
        }
        let mut li = linker.instance(import).map_err(link_err)?;
        for (fname, fitem) in instance.exports(engine) {
            let func = match &fitem.ty {
                ComponentItem::ComponentFunc(func) => func.clone(),
                // `use`d types (and the `join-set` resource) come along as type exports;
                // wasmtime checks the resource's identity against the host's.
                ComponentItem::Type(_) | ComponentItem::Resource(_) => continue,
                _ => {
                    return Err(unsatisfied(format!(
                        "`{fname}` ({:?}) is not a function of a generated interface",
                        fitem.ty
                    )));
                }
            };
            define_dynamic(&mut li, name, import, fname, &func, functions, mode)?;
        }
    }
    Ok(linker)
}

fn check(
    component: &str,
    import: &str,
    function: &str,
    func: &ComponentFunc,
    sig: Signature,
) -> Result<(), RegistryError> {
    match sig.mismatch(func) {
        None => Ok(()),
        Some(reason) => Err(RegistryError::ImportType {
            component: component.to_owned(),
            import: import.to_owned(),
            function: function.to_owned(),
            reason,
        }),
    }
}

fn target_params(f: &FunctionInfo) -> Vec<Shape> {
    f.func.params().map(|(_, t)| Shape::Exact(t)).collect()
}

fn define_dynamic(
    li: &mut LinkerInstance<'_, WorkflowState>,
    component: &str,
    import: &str,
    fname: &str,
    func: &ComponentFunc,
    functions: &[Arc<FunctionInfo>],
    mode: Mode,
) -> Result<(), RegistryError> {
    let not_found = || RegistryError::ImportType {
        component: component.to_owned(),
        import: import.to_owned(),
        function: fname.to_owned(),
        reason: format!(
            "is not a function {} of the target interface",
            match mode {
                Mode::Direct => "",
                Mode::Ext => "(nor an -submit/-await-next/-get/-schedule extension)",
                Mode::Stub => "(nor a -stub extension)",
            }
        ),
    };
    let find = |base: &str| {
        functions
            .iter()
            .find(|f| f.ffqn.function() == base)
            .cloned()
    };
    let link_err = |e: wasmtime::Error| RegistryError::Link {
        component: component.to_owned(),
        reason: format!("{import}#{fname}: {e:#}"),
    };
    let r = |f: &FunctionInfo| Shape::Exact(f.result.clone());
    // What a query function calling it is told it may not call.
    let what: Arc<str> = Arc::from(format!("{import}#{fname}"));
    match mode {
        Mode::Direct => {
            let f = find(fname).ok_or_else(not_found)?;
            let sig = Signature {
                params: target_params(&f),
                results: vec![r(&f)],
            };
            check(component, import, fname, func, sig)?;
            warn_unprojectable(component, &f);
            li.func_new_async(fname, move |store, _ty, params, results| {
                let f = f.clone();
                let what = what.clone();
                Box::new(async move {
                    store
                        .data()
                        .refuse_in_query(&what)
                        .map_err(HostFailure::into_wasmtime)?;
                    direct_call(store, &f, params, results)
                        .await
                        .map_err(HostFailure::into_wasmtime)
                })
            })
            .map_err(link_err)
        }
        Mode::Stub => {
            let f = fname
                .strip_suffix("-stub")
                .and_then(find)
                .ok_or_else(not_found)?;
            let sig = Signature {
                params: vec![shapes::execution_id(), r(&f)],
                results: vec![shapes::result(None, Some(shapes::stub_error()))],
            };
            check(component, import, fname, func, sig)?;
            li.func_new_async(fname, move |store, _ty, params, results| {
                let f = f.clone();
                let what = what.clone();
                Box::new(async move {
                    store
                        .data()
                        .refuse_in_query(&what)
                        .map_err(HostFailure::into_wasmtime)?;
                    stub(store, &f, params, results)
                        .await
                        .map_err(HostFailure::into_wasmtime)
                })
            })
            .map_err(link_err)
        }
        Mode::Ext => {
            let (op, f) = ["-submit", "-await-next", "-get", "-schedule"]
                .iter()
                .find_map(|suffix| {
                    fname
                        .strip_suffix(suffix)
                        .and_then(find)
                        .map(|f| (*suffix, f))
                })
                .ok_or_else(not_found)?;
            let sig = match op {
                "-submit" => Signature {
                    params: [vec![Shape::Borrow], target_params(&f)].concat(),
                    results: vec![shapes::execution_id()],
                },
                "-await-next" => Signature {
                    params: vec![Shape::Borrow],
                    results: vec![shapes::result(
                        Some(Shape::Tuple(vec![shapes::execution_id(), r(&f)])),
                        Some(shapes::await_next_error()),
                    )],
                },
                "-get" => Signature {
                    params: vec![shapes::execution_id()],
                    results: vec![shapes::result(Some(r(&f)), Some(shapes::get_error()))],
                },
                _ => Signature {
                    params: [vec![shapes::schedule_at()], target_params(&f)].concat(),
                    results: vec![shapes::execution_id()],
                },
            };
            check(component, import, fname, func, sig)?;
            if op != "-schedule" {
                warn_unprojectable(component, &f);
            }
            li.func_new_async(fname, move |store, _ty, params, results| {
                let f = f.clone();
                let what = what.clone();
                Box::new(async move {
                    store
                        .data()
                        .refuse_in_query(&what)
                        .map_err(HostFailure::into_wasmtime)?;
                    let done = match op {
                        "-submit" => submit(store, &f, params, results).await,
                        "-await-next" => await_next(store, &f, params, results).await,
                        "-get" => get(store, &f, params, results),
                        _ => schedule(store, &f, params, results),
                    };
                    done.map_err(HostFailure::into_wasmtime)
                })
            })
            .map_err(link_err)
        }
    }
}

/// README §4 rule 5: the host warns at load time about results whose `err` cannot carry a
/// child's execution error.
fn warn_unprojectable(component: &str, f: &FunctionInfo) {
    if !values::can_project_errors(&f.result) {
        tracing::warn!(
            component,
            function = %f.ffqn,
            result = %values::wit_type(&f.result),
            "the error type cannot carry a child's execution error: such a failure will fail the calling workflow"
        );
    }
}

// ---------------------------------------------------------------- helpers

fn params_json(f: &FunctionInfo, params: &[Val]) -> Result<Value, HostFailure> {
    params
        .iter()
        .zip(f.func.params())
        .map(|(v, (name, ty))| {
            values::val_to_json(v, &ty).map_err(|e| {
                HostFailure::BadValue(format!("parameter `{name}` of {}: {e}", f.ffqn))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn project(f: &FunctionInfo, result: &ExecutionResult) -> Result<Val, HostFailure> {
    values::result_to_val(result, &f.result).map_err(|e| match e {
        ProjectionError::Unrepresentable { err_type, error } => HostFailure::UnhandledChild(format!(
            "a child execution of {} failed with `{error}`, which the caller's error type {err_type} cannot represent",
            f.ffqn
        )),
        ProjectionError::Conversion(e) => {
            HostFailure::BadValue(format!("result of a child execution of {}: {e}", f.ffqn))
        }
    })
}

fn join_set_of(
    store: &mut StoreContextMut<'_, WorkflowState>,
    val: &Val,
) -> Result<crate::model::JoinSetId, HostFailure> {
    let Val::Resource(any) = val else {
        return Err(HostFailure::BadValue(format!(
            "expected a join-set handle, got {val:?}"
        )));
    };
    let resource = any
        .try_into_resource::<JoinSetResource>(&mut *store)
        .map_err(|e| HostFailure::BadValue(format!("not a join-set handle: {e}")))?;
    store.data().join_set(resource.rep())
}

fn new_join_set(
    store: &mut StoreContextMut<'_, WorkflowState>,
    id: crate::model::JoinSetId,
) -> Result<Val, HostFailure> {
    let state = store.data_mut();
    let rep = u32::try_from(state.join_sets.len())
        .map_err(|_| HostFailure::GuestError("too many join sets".into()))?;
    state.join_sets.push(id);
    let any =
        ResourceAny::try_from_resource(Resource::<JoinSetResource>::new_own(rep), &mut *store)
            .map_err(|e| HostFailure::BadValue(format!("cannot create a join-set handle: {e}")))?;
    Ok(Val::Resource(any))
}

fn param(params: &[Val], i: usize) -> Result<&Val, HostFailure> {
    params
        .get(i)
        .ok_or_else(|| HostFailure::BadValue(format!("missing parameter #{}", i + 1)))
}

fn set_result(results: &mut [Val], val: Val) -> Result<(), HostFailure> {
    let slot = results
        .first_mut()
        .ok_or_else(|| HostFailure::BadValue("no result slot".into()))?;
    *slot = val;
    Ok(())
}

// ---------------------------------------------------------------- extension functions

async fn direct_call(
    mut store: StoreContextMut<'_, WorkflowState>,
    f: &FunctionInfo,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    let json = params_json(f, params)?;
    let kind = f.child_kind();
    let result = store
        .data_mut()
        .wait(|r| r.call(&f.ffqn, &json, kind))
        .await?;
    set_result(results, project(f, &result)?)
}

async fn submit(
    mut store: StoreContextMut<'_, WorkflowState>,
    f: &FunctionInfo,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    let js = join_set_of(&mut store, param(params, 0)?)?;
    let json = params_json(f, &params[1..])?;
    let id = store
        .data_mut()
        .replay
        .submit(&js, &f.ffqn, &json, f.child_kind())?;
    set_result(results, id_record(id.to_string()))
}

async fn await_next(
    mut store: StoreContextMut<'_, WorkflowState>,
    f: &FunctionInfo,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    let js = join_set_of(&mut store, param(params, 0)?)?;
    let outcome = store
        .data_mut()
        .wait(|r| r.await_next(&js, &f.ffqn))
        .await?;
    let val = match outcome {
        Ok((id, result)) => Ok(Some(Box::new(Val::Tuple(vec![
            id_record(id.to_string()),
            project(f, &result)?,
        ])))),
        Err(AwaitNextError::AllProcessed) => Err(Some(Box::new(case("all-processed")))),
        Err(AwaitNextError::FunctionMismatch { requested, actual }) => {
            Err(Some(Box::new(Val::Variant(
                "function-mismatch".into(),
                Some(Box::new(convert::mismatch_of_joined(&requested, &actual))),
            ))))
        }
    };
    set_result(results, Val::Result(val))
}

fn get(
    store: StoreContextMut<'_, WorkflowState>,
    f: &FunctionInfo,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    let text = convert::id_text(param(params, 0)?)?;
    let found = match text.parse::<ExecutionId>() {
        Ok(id) => store.data().replay.get(&id, &f.ffqn).map(|r| (id, r)),
        // An id this execution never handed out.
        Err(_) => Err(GetError::NotFound),
    };
    let val = match found {
        Ok((_, result)) => Ok(Some(Box::new(project(f, &result)?))),
        Err(GetError::NotFound) => Err(Some(Box::new(case("not-found")))),
        Err(GetError::FunctionMismatch { requested, actual }) => {
            let id = text
                .parse::<ExecutionId>()
                .map_err(|e| HostFailure::BadValue(e.to_string()))?;
            Err(Some(Box::new(Val::Variant(
                "function-mismatch".into(),
                Some(Box::new(convert::function_mismatch(
                    &requested,
                    Some(&actual),
                    convert::response_id_of_child(&id),
                ))),
            ))))
        }
    };
    set_result(results, Val::Result(val))
}

fn schedule(
    mut store: StoreContextMut<'_, WorkflowState>,
    f: &FunctionInfo,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    let at = convert::schedule_at(param(params, 0)?)?;
    let json = params_json(f, &params[1..])?;
    let id = store.data_mut().replay.schedule(&f.ffqn, &json, at)?;
    set_result(results, id_record(id.to_string()))
}

async fn stub(
    mut store: StoreContextMut<'_, WorkflowState>,
    f: &FunctionInfo,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    let text = convert::id_text(param(params, 0)?)?;
    let value = values::return_to_result(param(params, 1)?, &f.result)
        .map_err(|e| HostFailure::BadValue(format!("return value of {}-stub: {e}", f.ffqn)))?;
    let state = store.data_mut();
    let own = state.replay.execution_id().clone();
    let outcome = match text.parse::<ExecutionId>() {
        // The engine checks that the id is a stub child of this execution; that it is a
        // child of *this* function is checked here against the recorded request.
        Ok(id) if submitted_as(state, &id, f) => state.replay.stub(&id, value)?,
        // Another execution's stub: a blocking request (`StubWrite`) its owner answers.
        Ok(id) if id.parent().is_some_and(|p| p != own) => {
            let params = serde_json::json!([
                id.to_string(),
                serde_json::to_value(&value).map_err(|e| HostFailure::BadValue(e.to_string()))?
            ]);
            let answer = state
                .wait(|r| r.call(&f.ffqn, &params, ChildKind::StubWrite))
                .await?;
            match answer {
                ExecutionResult::Ok(_) => Ok(()),
                ExecutionResult::Err(Value::String(e)) if e == "conflict" => {
                    Err(StubError::Conflict)
                }
                _ => Err(StubError::NotFound),
            }
        }
        _ => Err(StubError::NotFound),
    };
    let val = match outcome {
        Ok(()) => Ok(None),
        Err(StubError::Conflict) => Err(Some(Box::new(case("conflict")))),
        Err(StubError::NotFound) => Err(Some(Box::new(case("not-found")))),
    };
    set_result(results, Val::Result(val))
}

/// Whether the processed history holds a request of child `id` for function `f`.
fn submitted_as(state: &WorkflowState, id: &ExecutionId, f: &FunctionInfo) -> bool {
    let processed = &state.replay.history()[..state.replay.version().0 as usize];
    processed.iter().rev().any(|e| {
        matches!(e, HistoryEvent::JoinSetRequest {
            request: JoinSetRequest::ChildExecutionRequest { child_execution_id, target_ffqn, .. },
            ..
        } if child_execution_id == id && *target_ffqn == f.ffqn)
    })
}

// ---------------------------------------------------------------- weir:workflow/host

fn define_host(
    li: &mut LinkerInstance<'_, WorkflowState>,
    engine: &wasmtime::Engine,
    component: &str,
    import: &str,
    instance: &ComponentInstance,
) -> Result<(), RegistryError> {
    let link_err = |e: wasmtime::Error| RegistryError::Link {
        component: component.to_owned(),
        reason: format!("{import}: {e:#}"),
    };
    // Host-owned handles: the guest dropping one records nothing (host.wit), so no dtor work.
    li.resource(
        "join-set",
        ResourceType::host::<JoinSetResource>(),
        |_, _| Ok(()),
    )
    .map_err(link_err)?;
    for (fname, item) in instance.exports(engine) {
        let func = match item.ty {
            ComponentItem::ComponentFunc(func) => func,
            ComponentItem::Type(_) | ComponentItem::Resource(_) => continue,
            _ => {
                return Err(RegistryError::UnsatisfiedImport {
                    component: component.to_owned(),
                    import: format!("{import}#{fname}"),
                    reason: "is not provided by the host".into(),
                });
            }
        };
        let u16_ = || Shape::Exact(Type::U16);
        let u64_ = || Shape::Exact(Type::U64);
        let string = || Shape::Exact(Type::String);
        let sig = |params: Vec<Shape>, results: Vec<Shape>| Signature { params, results };
        let sig = match fname {
            "[static]join-set.create" => sig(vec![], vec![Shape::Own]),
            "[static]join-set.create-named" => sig(
                vec![string()],
                vec![shapes::result(
                    Some(Shape::Own),
                    Some(shapes::join_set_create_error()),
                )],
            ),
            "[method]join-set.id" => sig(vec![Shape::Borrow], vec![string()]),
            "[method]join-set.submit-delay" => sig(
                vec![Shape::Borrow, shapes::schedule_at()],
                vec![shapes::delay_id()],
            ),
            "[method]join-set.submit-event" => sig(
                vec![Shape::Borrow, string()],
                vec![shapes::event_request_id()],
            ),
            "[method]join-set.join-next" => sig(
                vec![Shape::Borrow],
                vec![shapes::result(
                    Some(shapes::response()),
                    Some(shapes::join_next_error()),
                )],
            ),
            "[static]join-set.close" => sig(vec![Shape::Own], vec![]),
            "sleep" => sig(vec![shapes::schedule_at()], vec![shapes::datetime()]),
            "await-event" => sig(vec![string()], vec![shapes::received_event()]),
            "correlate" => sig(vec![string()], vec![]),
            "random-u64" => sig(vec![u64_(), u64_()], vec![u64_()]),
            "random-string" => sig(vec![u16_(), u16_()], vec![string()]),
            "log" => sig(vec![shapes::log_level(), string()], vec![]),
            "set-state" => sig(vec![string(), string()], vec![]),
            "get-state" => sig(vec![string()], vec![Shape::Option(Box::new(string()))]),
            _ => {
                return Err(RegistryError::UnsatisfiedImport {
                    component: component.to_owned(),
                    import: format!("{import}#{fname}"),
                    reason: "is not a function of the Weir host interface".into(),
                });
            }
        };
        check(component, import, fname, &func, sig)?;
        let name = fname.to_owned();
        li.func_new_async(fname, move |store, _ty, params, results| {
            let name = name.clone();
            Box::new(async move {
                host_call(store, &name, params, results)
                    .await
                    .map_err(HostFailure::into_wasmtime)
            })
        })
        .map_err(link_err)?;
    }
    Ok(())
}

async fn host_call(
    mut store: StoreContextMut<'_, WorkflowState>,
    name: &str,
    params: &[Val],
    results: &mut [Val],
) -> Result<(), HostFailure> {
    // A query function reads and logs, nothing else (`query.rs`).
    if !matches!(name, "get-state" | "log") {
        store.data().refuse_in_query(name)?;
    }
    match name {
        "[static]join-set.create" => {
            let js = store.data_mut().replay.create_join_set()?;
            let handle = new_join_set(&mut store, js)?;
            set_result(results, handle)
        }
        "[static]join-set.create-named" => {
            let Val::String(n) = param(params, 0)? else {
                return Err(HostFailure::BadValue("create-named takes a string".into()));
            };
            let val = match store.data_mut().replay.create_named_join_set(n)? {
                Ok(js) => Ok(Some(Box::new(new_join_set(&mut store, js)?))),
                Err(CreateJoinSetError::Conflict(_)) => Err(Some(Box::new(case("conflict")))),
                Err(CreateJoinSetError::InvalidName(e)) => Err(Some(Box::new(Val::Variant(
                    "invalid-name".into(),
                    Some(Box::new(Val::String(e.to_string()))),
                )))),
            };
            set_result(results, Val::Result(val))
        }
        "[method]join-set.id" => {
            let js = join_set_of(&mut store, param(params, 0)?)?;
            set_result(results, Val::String(js.to_string()))
        }
        "[method]join-set.submit-delay" => {
            let js = join_set_of(&mut store, param(params, 0)?)?;
            let at = convert::schedule_at(param(params, 1)?)?;
            let state = store.data_mut();
            let delay = state.replay.submit_delay(&js, at)?;
            state.note_delay(&delay);
            set_result(results, id_record(delay.to_string()))
        }
        "[method]join-set.submit-event" => {
            let js = join_set_of(&mut store, param(params, 0)?)?;
            let Val::String(name) = param(params, 1)? else {
                return Err(HostFailure::BadValue("submit-event takes a string".into()));
            };
            let name = name.clone();
            let request = store
                .data_mut()
                .wait(|r| r.submit_event(&js, &name).map(Progress::Ready))
                .await?;
            set_result(results, id_record(request.to_string()))
        }
        "await-event" => {
            let Val::String(name) = param(params, 0)? else {
                return Err(HostFailure::BadValue("await-event takes a string".into()));
            };
            let name = name.clone();
            let (event_id, payload) = store
                .data_mut()
                .wait(|r| r.await_event(&name))
                .await?
                .map_err(|_| HostFailure::WaitCancelled)?;
            set_result(results, convert::received_event(&event_id, &payload))
        }
        "[method]join-set.join-next" => {
            let js = join_set_of(&mut store, param(params, 0)?)?;
            let state = store.data_mut();
            let next = state.wait(|r| r.join_next(&js)).await?;
            let val = match next {
                Ok(joined) => {
                    let expiry = match &joined {
                        crate::replay::Joined::Delay { delay_id, .. } => {
                            state.delay_expiries.get(delay_id).copied()
                        }
                        _ => None,
                    };
                    Ok(Some(Box::new(convert::response(&joined, expiry))))
                }
                Err(_) => Err(Some(Box::new(case("all-processed")))),
            };
            set_result(results, Val::Result(val))
        }
        "[static]join-set.close" => {
            let js = join_set_of(&mut store, param(params, 0)?)?;
            store.data_mut().wait(|r| r.close(&js)).await
        }
        "sleep" => {
            let at = convert::schedule_at(param(params, 0)?)?;
            let until = store
                .data_mut()
                .wait(|r| r.sleep(at))
                .await?
                .map_err(|_| HostFailure::WaitCancelled)?;
            set_result(results, convert::datetime(until))
        }
        "correlate" => {
            let Val::String(key) = param(params, 0)? else {
                return Err(HostFailure::BadValue("correlate takes a string".into()));
            };
            let key = key.clone();
            store
                .data_mut()
                .wait(|r| r.correlate(&key).map(Progress::Ready))
                .await?;
            Ok(())
        }
        "random-u64" => {
            let (Val::U64(min), Val::U64(max)) = (param(params, 0)?, param(params, 1)?) else {
                return Err(HostFailure::BadValue("random-u64 takes two u64".into()));
            };
            let (min, max) = (*min, *max);
            let v = store
                .data_mut()
                .wait(|r| r.random_u64(min, max).map(Progress::Ready))
                .await?;
            set_result(results, Val::U64(v))
        }
        "random-string" => {
            let (Val::U16(min), Val::U16(max)) = (param(params, 0)?, param(params, 1)?) else {
                return Err(HostFailure::BadValue("random-string takes two u16".into()));
            };
            let (min, max) = (u64::from(*min), u64::from(*max));
            let v = store
                .data_mut()
                .wait(|r| r.random_string(min, max).map(Progress::Ready))
                .await?;
            set_result(results, Val::String(v))
        }
        "set-state" => {
            let (Val::String(key), Val::String(value)) = (param(params, 0)?, param(params, 1)?)
            else {
                return Err(HostFailure::BadValue("set-state takes two strings".into()));
            };
            store
                .data()
                .state
                .lock()
                .set(key, value)
                .map_err(|e| HostFailure::GuestError(e.to_string()))
        }
        "get-state" => {
            let Val::String(key) = param(params, 0)? else {
                return Err(HostFailure::BadValue("get-state takes a string".into()));
            };
            let value = store
                .data()
                .state
                .lock()
                .get(key)
                .map(|v| Box::new(Val::String(v.to_owned())));
            set_result(results, Val::Option(value))
        }
        "log" => {
            let (Val::Enum(level), Val::String(message)) = (param(params, 0)?, param(params, 1)?)
            else {
                return Err(HostFailure::BadValue(
                    "log takes a level and a string".into(),
                ));
            };
            // Lines of calls that are being replayed were logged by the run that recorded them.
            if !store.data().replay.is_replaying() {
                match level.as_str() {
                    "trace" => tracing::trace!(target: "weir::workflow", "{message}"),
                    "debug" => tracing::debug!(target: "weir::workflow", "{message}"),
                    "info" => tracing::info!(target: "weir::workflow", "{message}"),
                    "warn" => tracing::warn!(target: "weir::workflow", "{message}"),
                    _ => tracing::error!(target: "weir::workflow", "{message}"),
                }
            }
            Ok(())
        }
        other => Err(HostFailure::BadValue(format!("no host function {other}"))),
    }
}
