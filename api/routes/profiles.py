"""``/v1/profiles``: upload and read measured (or analytic) layer profiles. Validated JSON only."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response
from starlette.concurrency import run_in_threadpool

from api.deps import StoreDep, v1_router
from api.problems import error_responses, not_found
from api.schemas import Page, ProfileSummary, StoredProfile
from planner.specs import Profile

router = v1_router("/profiles", "profiles")


@router.post(
    "",
    response_model=StoredProfile,
    status_code=201,
    responses={
        200: {"model": StoredProfile, "description": "This exact profile was stored before."},
        **error_responses(400, 401, 413, 422),
    },
)
async def create_profile(body: Profile, response: Response, store: StoreDep) -> StoredProfile:
    """Store a profile; its id is the content hash, so uploading it again returns the same id."""
    stored, created = await run_in_threadpool(store.put_profile, body)
    response.status_code = 201 if created else 200
    return stored


@router.get("", response_model=Page[ProfileSummary], responses=error_responses(401, 422))
async def list_profiles(
    store: StoreDep,
    model: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Page[ProfileSummary]:
    return await run_in_threadpool(lambda: store.list_profiles(model=model, limit=limit, offset=offset))


@router.get("/{profile_id}", response_model=StoredProfile, responses=error_responses(401, 404, 422))
async def get_profile(profile_id: str, store: StoreDep) -> StoredProfile:
    stored = await run_in_threadpool(store.get_profile, profile_id)
    if stored is None:
        raise not_found("profile", profile_id)
    return stored
