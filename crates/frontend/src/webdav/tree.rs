//! MKCOL, DELETE, COPY and MOVE: changes to the tree (RFC 4918 §9.3, §9.6, §9.8, §9.9).

use super::*;

pub(super) async fn mkcol(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    // RFC 4918 §9.3: a body we do not understand is 415.
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    if has_body {
        let body = xml_body(req).await?;
        if !body.is_empty() {
            return Err(dav_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "MKCOL with a body is not supported",
                None,
            ));
        }
    }
    let node = dav
        .storage()
        .create_dir(CreateDirRequest {
            r#ref: Some(loc.reference()),
            lock_tokens: loc.tokens.clone(),
        })
        .await
        .map_err(|s| {
            let kind = ErrorKind::of(&s);
            // The root always exists: the provider refuses to replace it.
            if kind == ErrorKind::AlreadyExists
                || (kind == ErrorKind::PermissionDenied && loc.path.is_root())
            {
                dav_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "The resource you tried to create already exists",
                    None,
                )
            } else {
                grpc_error(s)
            }
        })?
        .into_inner();
    let mut resp = StatusCode::CREATED.into_response();
    node_headers(resp.headers_mut(), &node);
    Ok(resp)
}

pub(super) async fn delete(dav: &Dav, loc: &Location, req: Request) -> Result<Response, Response> {
    let if_match = crate::headers::if_match(req.headers());
    dav.storage()
        .delete(DeleteRequest {
            r#ref: Some(loc.reference()),
            if_match,
            lock_tokens: loc.tokens.clone(),
        })
        .await
        .map_err(grpc_error)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Where a `Destination` header (RFC 4918 §10.3) points, for the caller: absolute on this
/// host or path-only, into any WebDAV root (a share mounted in the jail included).
pub(crate) async fn destination(
    dav: &Dav,
    h: &HeaderMap,
    who: &Identity,
) -> Result<Location, Response> {
    let Some(dest) = h.get("destination") else {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "Destination header missing",
            None,
        ));
    };
    let host = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let dest_path = match dav::parse_destination(dest.as_bytes(), &[host]) {
        Ok(p) => p,
        Err(DestinationError::OtherServer(d)) => {
            return Err(dav_error(
                StatusCode::BAD_GATEWAY,
                &format!("destination {d} is on another server"),
                None,
            ));
        }
        Err(e) => return Err(dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None)),
    };
    let mut raw = String::new();
    dav::encode_path(dest_path.as_str(), &mut raw);
    crate::webdav::jail::enter_destination(&dav.gateway, locate(&raw, who)?).await
}

pub(super) async fn copy_or_move(
    dav: &Dav,
    loc: &Location,
    req: Request,
    is_move: bool,
) -> Result<Response, Response> {
    let h = req.headers();
    let who = req
        .extensions()
        .get::<Identity>()
        .cloned()
        .ok_or_else(|| dav_error(StatusCode::UNAUTHORIZED, "no caller identity", None))?;
    let dest_loc = destination(dav, h, &who).await?;
    if dest_loc.space_id != loc.space_id {
        return Err(dav_error(
            StatusCode::BAD_GATEWAY,
            "copying or moving between spaces is not supported",
            None,
        ));
    }
    if dest_loc.path == loc.path {
        return Err(dav_error(
            StatusCode::FORBIDDEN,
            "source and destination are the same",
            None,
        ));
    }
    let overwrite = dav::parse_overwrite(h.get("overwrite").map(|v| v.as_bytes()))
        .map_err(|e| dav_error(StatusCode::BAD_REQUEST, &e.to_string(), None))?;
    let depth = depth(h, Depth::Infinity)?;
    if depth == Depth::One || (is_move && depth != Depth::Infinity) {
        return Err(dav_error(
            StatusCode::BAD_REQUEST,
            "Depth must be 0 or infinity here",
            None,
        ));
    }
    let mut client = dav.storage();
    let result = if is_move {
        client
            .r#move(MoveRequest {
                source: Some(loc.reference()),
                destination: Some(dest_loc.reference()),
                overwrite,
                lock_tokens: loc.tokens.clone(),
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                (r.node, r.replaced)
            })
    } else {
        client
            .copy(CopyRequest {
                source: Some(loc.reference()),
                destination: Some(dest_loc.reference()),
                overwrite,
                recursive: depth == Depth::Infinity,
                lock_tokens: loc.tokens.clone(),
            })
            .await
            .map(|r| {
                let r = r.into_inner();
                (r.node, r.replaced)
            })
    };
    let (node, replaced) = result.map_err(|s| match ErrorKind::of(&s) {
        // Overwrite: F and the destination exists (RFC 4918 §9.8.5, §9.9.4).
        ErrorKind::AlreadyExists => dav_error(
            StatusCode::PRECONDITION_FAILED,
            "the destination exists",
            None,
        ),
        _ => grpc_error(s),
    })?;
    let mut out = if replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    }
    .into_response();
    if let Some(node) = node {
        node_headers(out.headers_mut(), &node);
    }
    Ok(out)
}
