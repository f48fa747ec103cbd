//! Project spaces' members (users and groups with a role) and disabled spaces, in
//! `space_members` and `spaces.disabled` (migration 0028).
//!
//! Who may do what in a space is decided from these rows on every request (one indexed read),
//! so a role change or a removal takes effect on the very next request, open connections
//! included. A space always keeps one manager: the statements that would remove or demote the
//! last one change nothing and say so.

use std::time::SystemTime;

use sqlx::Row;

use super::Store;
use crate::db::{space_cols, space_from_row};
use crate::ids::{from_ns, now_ns};
use crate::{Result, Space, StoreError};

/// What a member may do in a space (oCIS's unified roles for spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads and downloads.
    Viewer,
    /// Also creates, changes and deletes content.
    Editor,
    /// Also shares, and manages the space and its members.
    Manager,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Manager => "manager",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "viewer" => Some(Role::Viewer),
            "editor" => Some(Role::Editor),
            "manager" => Some(Role::Manager),
            _ => None,
        }
    }
}

/// A user or a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberKind {
    User,
    Group,
}

impl MemberKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberKind::User => "user",
            MemberKind::Group => "group",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(MemberKind::User),
            "group" => Some(MemberKind::Group),
            _ => None,
        }
    }
}

/// One member of a space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub kind: MemberKind,
    /// The user's or the group's id.
    pub id: String,
    pub role: Role,
    pub created: SystemTime,
}

const LAST_MANAGER: StoreError = StoreError::Forbidden("a space keeps at least one manager");

/// `(kind = 'user' AND member = $2) OR (kind = 'group' AND member IN ($3, …))` for `groups`
/// group ids, the user's id being `$2`.
fn member_filter(groups: usize) -> String {
    let mut sql = String::from("((kind = 'user' AND member = $2)");
    if groups > 0 {
        sql.push_str(" OR (kind = 'group' AND member IN (");
        let marks: Vec<String> = (0..groups).map(|i| format!("${}", i + 3)).collect();
        sql.push_str(&marks.join(", "));
        sql.push_str("))");
    }
    sql.push(')');
    sql
}

impl Store {
    /// A space's members, managers first, then by kind and id.
    pub async fn space_members(&self, space_id: &str) -> Result<Vec<Member>> {
        let mut c = self.read_conn().await?;
        let rows = sqlx::query(
            "SELECT kind, member, role, created FROM space_members WHERE space_id = $1 \
             ORDER BY kind, member",
        )
        .bind(space_id)
        .fetch_all(&mut *c)
        .await?;
        let mut members = rows
            .iter()
            .map(|row| {
                let kind: String = row.try_get(0)?;
                let role: String = row.try_get(2)?;
                Ok(Member {
                    kind: MemberKind::parse(&kind)
                        .ok_or_else(|| StoreError::Corrupt(format!("member kind {kind}")))?,
                    id: row.try_get(1)?,
                    role: Role::parse(&role)
                        .ok_or_else(|| StoreError::Corrupt(format!("member role {role}")))?,
                    created: from_ns(row.try_get(3)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        members.sort_by_key(|m| std::cmp::Reverse(m.role));
        Ok(members)
    }

    /// The best role that `user` has in the space, directly or through one of `groups`.
    pub async fn member_role(
        &self,
        space_id: &str,
        user: &str,
        groups: &[String],
    ) -> Result<Option<Role>> {
        let mut c = self.read_conn().await?;
        // Only placeholders are made up here; every value is bound.
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT role FROM space_members WHERE space_id = $1 AND {}",
            member_filter(groups.len())
        ));
        let mut q = sqlx::query(sql).bind(space_id).bind(user);
        for g in groups {
            q = q.bind(g);
        }
        let rows = q.fetch_all(&mut *c).await?;
        let mut best = None;
        for row in &rows {
            let role: String = row.try_get(0)?;
            let role = Role::parse(&role)
                .ok_or_else(|| StoreError::Corrupt(format!("member role {role}")))?;
            best = best.max(Some(role));
        }
        Ok(best)
    }

    /// The project spaces `user` is a member of, directly or through one of `groups`.
    pub async fn member_spaces(&self, user: &str, groups: &[String]) -> Result<Vec<Space>> {
        let mut c = self.read_conn().await?;
        // `$1` is unused by the filter; it keeps the user at `$2` as member_filter wants.
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM spaces s JOIN nodes n ON n.id = s.id \
             WHERE s.kind = 'project' AND $1 = $1 AND s.id IN \
             (SELECT space_id FROM space_members WHERE {}) ORDER BY s.created, s.id",
            space_cols!(),
            member_filter(groups.len())
        ));
        let mut q = sqlx::query(sql).bind(0_i64).bind(user);
        for g in groups {
            q = q.bind(g);
        }
        let rows = q.fetch_all(&mut *c).await?;
        rows.iter().map(space_from_row).collect()
    }

    /// Makes `id` a member of the space with `role`, or changes its role. Refused
    /// ([`StoreError::Forbidden`]) when that would leave the space without a manager;
    /// [`StoreError::NotFound`] for an unknown space.
    pub async fn set_member(
        &self,
        space_id: &str,
        kind: MemberKind,
        id: &str,
        role: Role,
    ) -> Result<Member> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            let exists = sqlx::query("SELECT id FROM spaces WHERE id = $1")
                .bind(space_id)
                .fetch_optional(&mut *c)
                .await?;
            if exists.is_none() {
                return Err(StoreError::NotFound);
            }
            if role != Role::Manager {
                // Demoting the only manager is refused.
                let managers = sqlx::query(
                    "SELECT kind, member FROM space_members \
                     WHERE space_id = $1 AND role = 'manager'",
                )
                .bind(space_id)
                .fetch_all(&mut *c)
                .await?;
                let only_this = managers.len() == 1
                    && managers[0].try_get::<String, _>(0)? == kind.as_str()
                    && managers[0].try_get::<String, _>(1)? == id;
                if only_this {
                    return Err(LAST_MANAGER);
                }
            }
            let now = now_ns();
            sqlx::query(
                "INSERT INTO space_members (space_id, kind, member, role, created) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (space_id, kind, member) DO UPDATE SET role = $4",
            )
            .bind(space_id)
            .bind(kind.as_str())
            .bind(id)
            .bind(role.as_str())
            .bind(now)
            .execute(&mut *c)
            .await?;
            let created: i64 = sqlx::query(
                "SELECT created FROM space_members \
                 WHERE space_id = $1 AND kind = $2 AND member = $3",
            )
            .bind(space_id)
            .bind(kind.as_str())
            .bind(id)
            .fetch_one(&mut *c)
            .await?
            .try_get(0)?;
            Ok(Member {
                kind,
                id: id.to_owned(),
                role,
                created: from_ns(created),
            })
        }
        .await;
        w.finish(r).await
    }

    /// Removes a member: [`StoreError::NotFound`] when it is none, [`StoreError::Forbidden`]
    /// when it is the space's last manager.
    pub async fn remove_member(&self, space_id: &str, kind: MemberKind, id: &str) -> Result<()> {
        let mut w = self.db().begin_write().await?;
        let r = async {
            let c = w.conn();
            let row = sqlx::query(
                "SELECT role FROM space_members WHERE space_id = $1 AND kind = $2 AND member = $3",
            )
            .bind(space_id)
            .bind(kind.as_str())
            .bind(id)
            .fetch_optional(&mut *c)
            .await?
            .ok_or(StoreError::NotFound)?;
            if row.try_get::<String, _>(0)? == Role::Manager.as_str() {
                let managers: i64 = sqlx::query(
                    "SELECT count(*) FROM space_members WHERE space_id = $1 AND role = 'manager'",
                )
                .bind(space_id)
                .fetch_one(&mut *c)
                .await?
                .try_get(0)?;
                if managers <= 1 {
                    return Err(LAST_MANAGER);
                }
            }
            sqlx::query(
                "DELETE FROM space_members WHERE space_id = $1 AND kind = $2 AND member = $3",
            )
            .bind(space_id)
            .bind(kind.as_str())
            .bind(id)
            .execute(&mut *c)
            .await?;
            Ok(())
        }
        .await;
        w.finish(r).await
    }

    /// Disables a project space (`true`) or puts it back in use (`false`). `NotFound` for an
    /// unknown space; a personal space is never disabled.
    pub async fn set_disabled(&self, space_id: &str, disabled: bool) -> Result<()> {
        let when = disabled.then(now_ns);
        let mut w = self.db().begin_write().await?;
        let r = async {
            let done = sqlx::query(
                "UPDATE spaces SET disabled = $2 WHERE id = $1 AND kind = 'project' RETURNING id",
            )
            .bind(space_id)
            .bind(when)
            .fetch_optional(&mut *w.conn())
            .await?;
            done.map(|_| ()).ok_or(StoreError::NotFound)
        }
        .await;
        w.finish(r).await
    }
}
