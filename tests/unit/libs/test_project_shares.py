"""What the projects' shares leave `default`, and who acts in which project."""

from __future__ import annotations

from gpucloud_libs.project_shares import carved_gpus, default_share, may_act_in


def test_default_holds_what_the_shares_leave_and_never_less_than_nothing() -> None:
    assert default_share(16, [4, None, 6]) == 6
    assert default_share(16, [16]) == 0
    # Shares above the tenant's GPUs (a platform admin lowered its limit since): 0,
    # never a negative share that would let default's work hold fewer than none.
    assert default_share(8, [6, 6]) == 0
    assert carved_gpus([6, None, 6]) == 12


def test_a_tenant_admin_acts_in_the_projects_that_exist_alone() -> None:
    projects = {"vision": {"members": ["u-ada"]}}
    assert may_act_in(projects, "vision", user_id="u-root", role="tenant-admin")
    assert not may_act_in(projects, "ghost", user_id="u-root", role="tenant-admin")
    assert may_act_in(projects, "default", user_id="u-bob", role="tenant-user")
    assert not may_act_in(projects, "vision", user_id="u-bob", role="tenant-user")
