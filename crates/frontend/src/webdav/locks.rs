//! LOCK, UNLOCK and the `If` header (RFC 4918 §9.10, §9.11, §10.4).

use super::*;

/// Evaluates an `If` header (RFC 4918 §10.4): 412 when no list holds. Returns the lock tokens
/// it submits, which the provider checks against the locks an operation touches.
pub(crate) async fn check_if(
    dav: &Dav,
    who: &Identity,
    raw_path: &str,
    value: &HeaderValue,
) -> Result<Vec<String>, Response> {
    let header = dav::IfHeader::parse(value.as_bytes())
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let request_path = dav::decode_path(raw_path)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?
        .as_str()
        .to_owned();
    let mut paths = vec![request_path.clone()];
    for list in &header.lists {
        if let Some(tag) = &list.resource {
            let p = dav::if_header::tag_path(tag);
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
    }
    let mut states = Vec::with_capacity(paths.len());
    for p in paths {
        let mut encoded = String::new();
        dav::encode_path(&p, &mut encoded);
        // A tag naming something outside our trees matches nothing.
        let state = match locate(&encoded, who) {
            Ok(loc) => match dav
                .storage()
                .get_locks(GetLocksRequest {
                    r#ref: Some(loc.reference()),
                })
                .await
            {
                Ok(r) => {
                    let r = r.into_inner();
                    let etag = (!r.etag.is_empty()).then_some(r.etag);
                    (etag, r.locks.into_iter().map(|l| l.token).collect())
                }
                Err(s) if ErrorKind::of(&s) == ErrorKind::NotFound => (None, Vec::new()),
                Err(s) => return Err(grpc_error(s)),
            },
            Err(_) => (None, Vec::new()),
        };
        states.push((p, state));
    }
    let holds = header.evaluate(&request_path, |p| {
        states
            .iter()
            .find(|(path, _)| path == p)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    });
    if !holds {
        return Err(dav_error(
            StatusCode::PRECONDITION_FAILED,
            "the If header's conditions do not hold",
            None,
        ));
    }
    Ok(header
        .submitted_tokens()
        .filter(|t| *t != dav::if_header::NO_LOCK)
        .map(str::to_owned)
        .collect())
}

pub(super) fn active_lock<'a>(l: &'a ActiveLock, root: &'a str) -> dav::ActiveLock<'a> {
    dav::ActiveLock {
        scope: if l.exclusive {
            dav::xml::LockScope::Exclusive
        } else {
            dav::xml::LockScope::Shared
        },
        depth: if l.deep { Depth::Infinity } else { Depth::Zero },
        owner: (!l.owner.is_empty()).then_some(l.owner.as_str()),
        timeout_secs: (l.timeout_secs > 0).then_some(l.timeout_secs),
        token: &l.token,
        root,
    }
}

/// Locks granted without a `Timeout` header last this long; longer asks are capped (a lock
/// left by a vanished client must not block others forever).
pub(super) const LOCK_DEFAULT_SECS: u64 = 3600;
pub(super) const LOCK_MAX_SECS: u64 = 7 * 24 * 3600;

pub(super) async fn lock(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let depth = depth(req.headers(), Depth::Infinity)?;
    if depth == Depth::One {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "a lock has Depth 0 or infinity",
            None,
        ));
    }
    let timeout = dav::lock_timeout(
        req.headers().get("timeout"),
        LOCK_DEFAULT_SECS,
        LOCK_MAX_SECS,
    );
    let body = xml_body(req).await?;
    let info = dav::parse_lockinfo(&body)
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let request = match &info {
        // A refresh names its lock in the If header (RFC 4918 §9.10.2).
        None => {
            let Some(token) = loc.tokens.first() else {
                return Err(dav_error(
                    StatusCode::BAD_REQUEST,
                    "a lock refresh needs the lock token in an If header",
                    None,
                ));
            };
            LockRequest {
                r#ref: Some(loc.reference()),
                refresh_token: token.clone(),
                timeout_secs: timeout,
                ..Default::default()
            }
        }
        Some(info) => LockRequest {
            r#ref: Some(loc.reference()),
            refresh_token: String::new(),
            exclusive: info.scope == dav::xml::LockScope::Exclusive,
            deep: depth == Depth::Infinity,
            owner: info.owner.clone().unwrap_or_default(),
            timeout_secs: timeout,
            lock_tokens: loc.tokens.clone(),
        },
    };
    let answer = dav
        .storage()
        .lock(request)
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::Locked => dav_error(
                StatusCode::LOCKED,
                s.message(),
                Some(&Precondition::NoConflictingLock(Vec::new())),
            ),
            _ => grpc_error(s),
        })?
        .into_inner();
    let granted = answer.lock.unwrap_or_default();
    let root = loc.href(&granted.root_path, false);
    let body = dav::lock_response_body(&[active_lock(&granted, &root)]);
    let status = if answer.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = xml_answer(status, body);
    if info.is_some()
        && let Ok(v) = HeaderValue::from_str(&format!("<{}>", granted.token))
    {
        resp.headers_mut()
            .insert(HeaderName::from_static("lock-token"), v);
    }
    Ok(resp)
}

pub(super) async fn unlock(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let Some(value) = req.headers().get("lock-token") else {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "UNLOCK needs a Lock-Token header",
            None,
        ));
    };
    let token = dav::parse_lock_token(value.as_bytes())
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    dav.storage()
        .unlock(UnlockRequest {
            r#ref: Some(loc.reference()),
            token,
        })
        .await
        .map_err(|s| match ErrorKind::of(&s) {
            ErrorKind::Conflict => dav_error(
                StatusCode::CONFLICT,
                s.message(),
                Some(&Precondition::LockTokenMatchesRequestUri),
            ),
            _ => grpc_error(s),
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
